/*
 * optim_state.c - an optimizer's state (moments, step count, rate) saved
 * to and loaded from a safetensors file, so that a run resumes exactly
 * (see qkv_optim_save in optim.h for the file and the checks).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers/internal.h"
#include "train/internal.h"
#include "util/util.h"

#define MAX_LABEL 1000 /* bytes of a parameter's name: with a suffix, the reader's 1024 */

/* The names of the state tensors of one parameter, by kind. */
static const char *const sgd_suffix[] = {"momentum_buffer"};
static const char *const adam_suffix[] = {"exp_avg", "exp_avg_sq"};

static int per_param(const qkv_optim *o)
{
    return o->cfg.kind == QKV_SGD ? 1 : 2;
}

/* Tensor key k (0 = m, 1 = v) of parameter i, "NAME.exp_avg" or, without a
 * name, "I.exp_avg", into buf. */
static void state_key(const qkv_optim *o, int i, int k, char *buf, size_t size)
{
    const char *suffix = (o->cfg.kind == QKV_SGD ? sgd_suffix : adam_suffix)[k];
    if (o->names[i] != NULL)
        snprintf(buf, size, "%s.%s", o->names[i], suffix);
    else
        snprintf(buf, size, "%d.%s", i, suffix);
}

/* Parameter i for a message: "parameter 'NAME'" or "parameter I". */
static const char *who(const qkv_optim *o, int i, char *buf, size_t size)
{
    if (o->names[i] != NULL)
        snprintf(buf, size, "parameter '%s'", o->names[i]);
    else
        snprintf(buf, size, "parameter %d", i);
    return buf;
}

/* ------------------------------------------------------------------------ */
/* saving                                                                   */

typedef struct saver {
    const qkv_optim *o;
    const double *decay; /* (n) each parameter's decay switch as 0 or 1 */
    char *key;           /* (MAX_LABEL + 32) the name of the last tensor given */
} saver;

/* Tensor i of the file: each parameter's moments in order, then the
 * decay switches and the rate scales. */
static void state_tensor(const void *ctx, int i, qkv_st_tensor *out)
{
    const saver *s = ctx;
    const qkv_optim *o = s->o;
    const int k = per_param(o);
    out->real = NULL;
    out->name = s->key;
    if (i < o->n * k) {
        const qkv_tensor *p = o->params[i / k];
        state_key(o, i / k, i % k, s->key, MAX_LABEL + 32);
        out->ndim = p->ndim;
        out->shape = p->shape;
        out->f64 = i % k == 0 ? o->m[i / k] : o->v[i / k];
        out->numel = p->numel;
        return;
    }
    snprintf(s->key, MAX_LABEL + 32, i == o->n * k ? "qkv_optim.decay" : "qkv_optim.lr_scale");
    out->ndim = 1;
    out->shape = &o->n;
    out->f64 = i == o->n * k ? s->decay : o->lr_scale;
    out->numel = (size_t)o->n;
}

/* Why o's names cannot make a file, into err, or QKV_OK. */
static qkv_status check_names(const qkv_optim *o, const char *path, qkv_error *err)
{
    char a[MAX_LABEL + 32], b[MAX_LABEL + 32];
    for (int i = 0; i < o->n; i++) {
        const char *name = o->names[i];
        if (name == NULL)
            continue;
        if (strlen(name) > MAX_LABEL || !qkv_utf8_valid(name, strlen(name), NULL))
            return qkv_error_set(err, QKV_ERR_ARG,
                                 "optim: parameter %d's name is %s; %s was left untouched", i,
                                 strlen(name) > MAX_LABEL ? "over 1000 bytes" : "not UTF-8", path);
    }
    for (int i = 1; i < o->n; i++) /* the reader refuses a repeated key: never write one */
        for (int j = 0; j < i; j++) {
            state_key(o, i, 0, a, sizeof a);
            state_key(o, j, 0, b, sizeof b);
            if (strcmp(a, b) == 0)
                return qkv_error_set(err, QKV_ERR_ARG,
                                     "optim: parameters %d and %d have one name, %s; %s was left "
                                     "untouched",
                                     j, i, a, path);
        }
    return QKV_OK;
}

/* The metadata keys, in the order qkv_optim_save writes them. */
enum { M_KIND, M_STEPS, M_LR, M_NORM, M_MOMENTUM, M_BETA1, M_BETA2, M_EPS, M_WD, M_CLIP, N_META };
static const char *const meta_key[N_META] = {
    "qkv_optim",           "qkv_optim_steps",    "qkv_optim_lr",
    "qkv_optim_last_norm", "qkv_optim_momentum", "qkv_optim_beta1",
    "qkv_optim_beta2",     "qkv_optim_eps",      "qkv_optim_weight_decay",
    "qkv_optim_clip"};

/* The config's settings that a load checks, as meta_key orders them from
 * M_MOMENTUM, and their names in messages. */
static void checked_settings(const qkv_optim_config *c, double v[N_META - M_MOMENTUM])
{
    v[0] = c->momentum;
    v[1] = c->beta1;
    v[2] = c->beta2;
    v[3] = c->eps;
    v[4] = c->weight_decay;
    v[5] = c->clip;
}
static const char *const setting_name[N_META - M_MOMENTUM] = {"momentum", "beta1",        "beta2",
                                                              "eps",      "weight decay", "clip"};

qkv_status qkv_optim_save(const qkv_optim *o, const char *path, qkv_error *err)
{
    if (o == NULL || path == NULL)
        return qkv_error_set(err, QKV_ERR_ARG, "optim: no optimizer or no path (NULL)");
    qkv_status s = check_names(o, path, err);
    if (s != QKV_OK)
        return s;
    char values[N_META][32];
    double set[N_META - M_MOMENTUM];
    checked_settings(&o->cfg, set);
    snprintf(values[M_KIND], 32, "%s", qkv_optim_name(o->cfg.kind));
    snprintf(values[M_STEPS], 32, "%ld", o->t);
    snprintf(values[M_LR], 32, "%.17g", o->cfg.lr);
    snprintf(values[M_NORM], 32, "%.17g", o->last_norm);
    for (int k = M_MOMENTUM; k < N_META; k++)
        snprintf(values[k], 32, "%.17g", set[k - M_MOMENTUM]);
    qkv_meta_entry meta[N_META];
    for (int k = 0; k < N_META; k++)
        meta[k] = (qkv_meta_entry){meta_key[k], values[k]};
    double *decay = qkv_malloc(sizeof *decay * (size_t)o->n);
    char *key = qkv_malloc(MAX_LABEL + 32);
    if (decay == NULL || key == NULL) {
        s = qkv_error_set(err, QKV_ERR_NOMEM, "optim: out of memory to save %s", path);
    } else {
        for (int i = 0; i < o->n; i++)
            decay[i] = o->decay[i];
        saver sv = {o, decay, key};
        s = qkv_st_write(path, o->n * per_param(o) + 2, state_tensor, &sv, meta, N_META, err);
    }
    free(decay);
    free(key);
    return s;
}

/* ------------------------------------------------------------------------ */
/* loading                                                                  */

/* a and b as a message shows them: %g, or all 17 digits when %g shows
 * them alike. */
static void two_numbers(double a, double b, char *sa, char *sb, size_t size)
{
    snprintf(sa, size, "%g", a);
    snprintf(sb, size, "%g", b);
    if (strcmp(sa, sb) == 0) {
        snprintf(sa, size, "%.17g", a);
        snprintf(sb, size, "%.17g", b);
    }
}

/* The number in metadata key of f, whole (strtod's) and finite, into *x;
 * or QKV_ERR_FORMAT saying it is missing or damaged. */
static qkv_status meta_number(const qkv_st *f, const char *path, const char *key, double *x,
                              qkv_error *err)
{
    const char *s = qkv_st_meta(f, key);
    char *end = NULL;
    *x = s != NULL ? strtod(s, &end) : 0;
    if (s == NULL || end == s || *end != '\0' || !isfinite(*x) || *x < 0)
        return qkv_error_set(err, QKV_ERR_FORMAT, "%s: %s %s in its metadata", path,
                             s == NULL ? "no" : "a damaged", key);
    return QKV_OK;
}

/* The kind and the number of parameters of f against o's. */
static qkv_status check_kind(const qkv_optim *o, const qkv_st *f, const char *path, qkv_error *err)
{
    const char *kind = qkv_st_meta(f, meta_key[M_KIND]);
    qkv_optim_kind k;
    if (kind == NULL)
        return qkv_error_set(err, QKV_ERR_FORMAT,
                             "%s holds no optimizer state (no qkv_optim in its metadata; a "
                             "weights file?)",
                             path);
    if (qkv_optim_parse(kind, &k) != 0) {
        char shown[48]; /* from the file: escaped, and cut short */
        qkv_escape(shown, sizeof shown, kind);
        return qkv_error_set(err, QKV_ERR_FORMAT,
                             "%s holds the state of an unknown kind '%s' (not sgd, adam or adamw)",
                             path, shown);
    }
    if (k != o->cfg.kind)
        return qkv_error_set(err, QKV_ERR_FORMAT, "%s holds the state of %s; this optimizer is %s",
                             path, kind, qkv_optim_name(o->cfg.kind));
    for (int t = 0; t < 2; t++) {
        const char *name = t == 0 ? "qkv_optim.decay" : "qkv_optim.lr_scale";
        const int i = qkv_st_find(f, name);
        uint64_t dims[QKV_ST_MAX_DIMS];
        if (i < 0 || qkv_st_dims(f, i, dims, QKV_ST_MAX_DIMS) != 1)
            return qkv_error_set(err, QKV_ERR_FORMAT, "%s has no tensor '%s' of one dimension",
                                 path, name);
        if (dims[0] != (uint64_t)o->n)
            return qkv_error_set(err, QKV_ERR_FORMAT,
                                 "%s holds the state of %" PRIu64
                                 " parameters; this optimizer has %d",
                                 path, dims[0], o->n);
    }
    return QKV_OK;
}

/* Each parameter's state tensors of f: there, with the parameter's shape,
 * and no other tensor. */
static qkv_status check_tensors(const qkv_optim *o, const qkv_st *f, const char *path,
                                qkv_error *err)
{
    char key[MAX_LABEL + 32], buf[MAX_LABEL + 32];
    const int k = per_param(o);
    for (int i = 0; i < o->n; i++)
        for (int w = 0; w < k; w++) {
            state_key(o, i, w, key, sizeof key);
            const int j = qkv_st_find(f, key);
            if (j < 0)
                return qkv_error_set(err, QKV_ERR_FORMAT,
                                     "%s has no tensor '%s': it holds the state of other "
                                     "parameters",
                                     path, key);
            const qkv_tensor *p = o->params[i];
            uint64_t dims[QKV_ST_MAX_DIMS];
            int nd = qkv_st_dims(f, j, dims, QKV_ST_MAX_DIMS), same = nd == p->ndim;
            for (int d = 0; same && d < nd; d++)
                same = dims[d] == (uint64_t)p->shape[d];
            if (same)
                continue;
            char got[128] = "[", want[64];
            for (int d = 0; d < nd; d++)
                snprintf(got + strlen(got), sizeof got - strlen(got), d ? ",%" PRIu64 : "%" PRIu64,
                         dims[d]);
            snprintf(got + strlen(got), sizeof got - strlen(got), "]");
            qkv_shape_str(p, want, sizeof want);
            return qkv_error_set(err, QKV_ERR_SHAPE, "%s: tensor '%s' is %s; %s is %s", path, key,
                                 got, who(o, i, buf, sizeof buf), want);
        }
    if (qkv_st_count(f) != o->n * k + 2) /* each one above is there once: one more is extra */
        for (int j = 0; j < qkv_st_count(f); j++) {
            const char *name = qkv_st_name(f, j);
            int ours =
                strcmp(name, "qkv_optim.decay") == 0 || strcmp(name, "qkv_optim.lr_scale") == 0;
            for (int i = 0; !ours && i < o->n; i++)
                for (int w = 0; !ours && w < k; w++) {
                    state_key(o, i, w, key, sizeof key);
                    ours = strcmp(name, key) == 0;
                }
            if (!ours)
                return qkv_error_set(err, QKV_ERR_FORMAT,
                                     "%s has tensor '%s', which is no state of this optimizer",
                                     path, name);
        }
    return QKV_OK;
}

/* The settings a resume must share: the config's, then each parameter's
 * decay switch and rate scale (read into decay and scale, n each). */
static qkv_status check_settings(const qkv_optim *o, const qkv_st *f, const char *path,
                                 double *decay, double *scale, qkv_error *err)
{
    double mine[N_META - M_MOMENTUM];
    char a[32], b[32], buf[MAX_LABEL + 32];
    checked_settings(&o->cfg, mine);
    for (int k = M_MOMENTUM; k < N_META; k++) {
        double x;
        qkv_status s = meta_number(f, path, meta_key[k], &x, err);
        if (s != QKV_OK)
            return s;
        if (x == mine[k - M_MOMENTUM])
            continue;
        two_numbers(x, mine[k - M_MOMENTUM], a, b, sizeof a);
        return qkv_error_set(err, QKV_ERR_ARG,
                             "%s was saved with %s %s; this optimizer has %s (a resume needs the "
                             "same)",
                             path, setting_name[k - M_MOMENTUM], a, b);
    }
    qkv_status s = qkv_st_read_f64(f, qkv_st_find(f, "qkv_optim.decay"), decay, (size_t)o->n, err);
    if (s == QKV_OK)
        s = qkv_st_read_f64(f, qkv_st_find(f, "qkv_optim.lr_scale"), scale, (size_t)o->n, err);
    for (int i = 0; s == QKV_OK && i < o->n; i++)
        if ((decay[i] != 0) != (o->decay[i] != 0))
            s = qkv_error_set(err, QKV_ERR_ARG,
                              "%s: %s was saved with weight decay %s; here it is %s", path,
                              who(o, i, buf, sizeof buf), decay[i] != 0 ? "on" : "off",
                              o->decay[i] ? "on" : "off");
        else if (scale[i] != o->lr_scale[i]) {
            two_numbers(scale[i], o->lr_scale[i], a, b, sizeof a);
            s = qkv_error_set(err, QKV_ERR_ARG, "%s: %s was saved with lr scale %s; here it is %s",
                              path, who(o, i, buf, sizeof buf), a, b);
        }
    return s;
}

/* Why values v (n) of tensor key cannot be an Adam second moment, a
 * decaying sum of squares, into err; or QKV_OK. A negative one would
 * make the next update NaN (its square root). */
static qkv_status check_second_moment(const double *v, size_t n, const char *path, const char *key,
                                      qkv_error *err)
{
    for (size_t j = 0; j < n; j++)
        if (v[j] < 0)
            return qkv_error_set(err, QKV_ERR_FORMAT,
                                 "%s: tensor '%s' value %zu is %g; a second moment is never "
                                 "negative",
                                 path, key, j, v[j]);
    return QKV_OK;
}

/* Reads every moment of f into new arrays, moments[n·k] (parameter i's
 * which-th at i·k + which); on an error frees what it made. */
static qkv_status read_moments(const qkv_optim *o, const qkv_st *f, const char *path,
                               double **moments, qkv_error *err)
{
    char key[MAX_LABEL + 32];
    const int k = per_param(o);
    qkv_status s = QKV_OK;
    for (int i = 0; s == QKV_OK && i < o->n * k; i++) {
        const size_t n = o->params[i / k]->numel;
        if ((moments[i] = qkv_malloc(sizeof(double) * (n ? n : 1))) == NULL) {
            s = qkv_error_set(err, QKV_ERR_NOMEM, "optim: out of memory to load %s", path);
            break;
        }
        state_key(o, i / k, i % k, key, sizeof key);
        s = qkv_st_read_f64(f, qkv_st_find(f, key), moments[i], n, err);
        if (s == QKV_OK && i % k == 1)
            s = check_second_moment(moments[i], n, path, key, err);
    }
    if (s != QKV_OK)
        for (int i = 0; i < o->n * k; i++)
            free(moments[i]);
    return s;
}

/* Checks f against o, then loads it; nothing changes on an error. */
static qkv_status load(qkv_optim *o, const qkv_st *f, const char *path, qkv_error *err)
{
    qkv_status s = check_kind(o, f, path, err);
    if (s == QKV_OK)
        s = check_tensors(o, f, path, err);
    double steps = 0, lr = 0, norm = 0;
    if (s == QKV_OK)
        s = meta_number(f, path, meta_key[M_STEPS], &steps, err);
    if (s == QKV_OK && (steps != floor(steps) || steps > 1e15))
        s = qkv_error_set(err, QKV_ERR_FORMAT, "%s: a damaged qkv_optim_steps in its metadata",
                          path);
    if (s == QKV_OK)
        s = meta_number(f, path, meta_key[M_LR], &lr, err);
    if (s == QKV_OK)
        s = meta_number(f, path, meta_key[M_NORM], &norm, err);
    if (s != QKV_OK)
        return s;
    const int k = per_param(o);
    double *decay = qkv_malloc(sizeof(double) * (size_t)o->n);
    double *scale = qkv_malloc(sizeof(double) * (size_t)o->n);
    double **moments = qkv_calloc((size_t)(o->n * k), sizeof *moments);
    if (decay == NULL || scale == NULL || moments == NULL)
        s = qkv_error_set(err, QKV_ERR_NOMEM, "optim: out of memory to load %s", path);
    if (s == QKV_OK)
        s = check_settings(o, f, path, decay, scale, err);
    if (s == QKV_OK)
        s = read_moments(o, f, path, moments, err);
    if (s == QKV_OK) { /* every check passed: swap the new moments in */
        for (int i = 0; i < o->n; i++) {
            free(o->m[i]);
            o->m[i] = moments[i * k];
            if (k == 2) {
                free(o->v[i]);
                o->v[i] = moments[i * k + 1];
            }
        }
        o->t = (long)steps;
        o->cfg.lr = lr;
        o->last_norm = norm;
        o->message[0] = '\0';
    }
    free(decay);
    free(scale);
    free(moments);
    return s;
}

qkv_status qkv_optim_load(qkv_optim *o, const char *path, qkv_error *err)
{
    if (o == NULL || path == NULL)
        return qkv_error_set(err, QKV_ERR_ARG, "optim: no optimizer or no path (NULL)");
    qkv_error local = qkv_error_none();
    qkv_st *f = qkv_st_open(path, &local);
    qkv_status s = f != NULL ? load(o, f, path, &local) : local.status;
    qkv_st_close(f);
    if (s != QKV_OK && err != NULL)
        *err = local;
    return s;
}
