/*
 * ablate.c - the attention layer's variants (see ablate.h), each recorded
 * from the library's ops: gather, matmul_nt, scale, mask, softmax, matmul.
 */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "apps/coref/ablate.h"
#include "apps/coref/vocab.h"
#include "qkv/rng.h"

const char *const qkv_ablate_names[QKV_ABLATE_VARIANTS] = {
    "full",   "no-v",    "shared-qk",      "shared-qk-noself", "bilinear",
    "base-2", "base-10", "base-2-matched", "base-10-matched"};

int qkv_ablate_parse(const char *name, qkv_ablate_config *cfg)
{
    static const struct {
        qkv_ablate_kind kind;
        double base;
        int matched;
    } v[QKV_ABLATE_VARIANTS] = {{QKV_ABLATE_FULL, QKV_ABLATE_E, 0},
                                {QKV_ABLATE_NO_V, QKV_ABLATE_E, 0},
                                {QKV_ABLATE_SHARED_QK, QKV_ABLATE_E, 0},
                                {QKV_ABLATE_SHARED_QK_NOSELF, QKV_ABLATE_E, 0},
                                {QKV_ABLATE_BILINEAR, QKV_ABLATE_E, 0},
                                {QKV_ABLATE_BASE, 2, 0},
                                {QKV_ABLATE_BASE, 10, 0},
                                {QKV_ABLATE_BASE, 2, 1},
                                {QKV_ABLATE_BASE, 10, 1}};
    for (int i = 0; name != NULL && cfg != NULL && i < QKV_ABLATE_VARIANTS; i++)
        if (strcmp(name, qkv_ablate_names[i]) == 0) {
            cfg->kind = v[i].kind;
            cfg->base = v[i].base;
            cfg->matched = v[i].matched;
            return 0;
        }
    return -1;
}

void qkv_ablate_model_free(qkv_ablate_model *m)
{
    if (m == NULL)
        return;
    qkv_params_free(m->list);
    free(m);
}

/* The factor on Wq and Wk of a matched base variant: 1/√(ln b). */
static double matched_factor(const qkv_ablate_config *c)
{
    return c->kind == QKV_ABLATE_BASE && c->matched ? 1 / sqrt(log(c->base)) : 1;
}

qkv_ablate_model *qkv_ablate_model_new(const qkv_ablate_config *cfg, qkv_error *err)
{
    if (cfg == NULL || cfg->vocab < 1 || cfg->classes < 1 || cfg->d_k < 1 ||
        cfg->d_k > QKV_COREF_MAX_DK || (unsigned)cfg->kind > QKV_ABLATE_BASE || !(cfg->base > 1) ||
        !isfinite(cfg->base)) {
        qkv_error_set(err, QKV_ERR_ARG, "ablate: a bad variant config");
        return NULL;
    }
    qkv_ablate_model *m = calloc(1, sizeof *m);
    if (m == NULL || (m->list = qkv_params_new(cfg->seed, err)) == NULL) {
        free(m);
        if (err != NULL && err->status == QKV_OK)
            qkv_error_set(err, QKV_ERR_NOMEM, "ablate: out of memory");
        return NULL;
    }
    m->cfg = *cfg;
    const int V = cfg->vocab, dk = cfg->d_k;
    const int dv = cfg->kind == QKV_ABLATE_NO_V ? V : dk;
    const double f = matched_factor(cfg);
    const qkv_init qk = {QKV_INIT_NORMAL, 0, 0.1 * f}, tutorial = {QKV_INIT_NORMAL, 0, 0.1};
    qkv_tensor *nil = qkv_nil();
    m->wq = m->wk = m->wv = m->m = nil;
    if (cfg->kind == QKV_ABLATE_BILINEAR) {
        m->m = qkv_params_add(m->list, "m", 2, (const int[]){V, V},
                              (qkv_init){QKV_INIT_NORMAL, 0, 0.01}, err);
    } else {
        m->wq = qkv_params_add(m->list, "wq", 2, (const int[]){V, dk}, qk, err);
        m->wk = cfg->kind == QKV_ABLATE_SHARED_QK || cfg->kind == QKV_ABLATE_SHARED_QK_NOSELF
                    ? m->wq
                    : qkv_params_add(m->list, "wk", 2, (const int[]){V, dk}, qk, err);
    }
    if (cfg->kind != QKV_ABLATE_NO_V)
        m->wv = qkv_params_add(m->list, "wv", 2, (const int[]){V, dk}, tutorial, err);
    m->wo = qkv_params_add(m->list, "wo", 2, (const int[]){dv, cfg->classes},
                           (qkv_init){QKV_INIT_NORMAL, 0, 1 / sqrt((double)dv)}, err);
    if (qkv_tensor_is_nil(m->wo) ||
        (cfg->kind == QKV_ABLATE_BILINEAR ? qkv_tensor_is_nil(m->m)
                                          : qkv_tensor_is_nil(m->wq) || qkv_tensor_is_nil(m->wk)) ||
        (cfg->kind != QKV_ABLATE_NO_V && qkv_tensor_is_nil(m->wv))) {
        qkv_ablate_model_free(m);
        return NULL;
    }
    /* the ones a variant does not have are NULL */
    if (qkv_tensor_is_nil(m->wq))
        m->wq = m->wk = NULL;
    if (qkv_tensor_is_nil(m->wv))
        m->wv = NULL;
    if (qkv_tensor_is_nil(m->m))
        m->m = NULL;
    return m;
}

double qkv_ablate_lr_scale(const qkv_ablate_model *m, int i)
{
    const qkv_tensor *p = m != NULL ? qkv_params_at(m->list, i, NULL) : NULL;
    return p != NULL && (p == m->wq || p == m->wk) ? matched_factor(&m->cfg) : 1;
}

/* The batch's ids as [B,T] on the tape, its one-hot rows X [B,T,V] when
 * want_x, and the additive mask: padded keys, and each token's own
 * position when noself ([B,T,T] then, [B,1,T] otherwise). */
static int *pack(qkv_tape *t, const qkv_coref_batch *b, int V, int want_x, int noself,
                 qkv_tensor **x, qkv_tensor **mask)
{
    const int B = b->B, T = b->T;
    int *ids = qkv_tape_alloc(t, sizeof *ids * (size_t)B * (size_t)T);
    *mask = noself ? qkv_tape_tensor(t, 3, (const int[]){B, T, T}, 0)
                   : qkv_tape_tensor(t, 3, (const int[]){B, 1, T}, 0);
    *x = want_x ? qkv_tape_tensor(t, 3, (const int[]){B, T, V}, 0) : NULL;
    if (ids == NULL || qkv_tensor_is_nil(*mask) || (want_x && qkv_tensor_is_nil(*x)))
        return NULL;
    if (want_x)
        memset((*x)->data, 0, sizeof(qkv_real) * (*x)->numel);
    const int rows = noself ? T : 1;
    for (int i = 0; i < B; i++)
        for (int j = 0; j < T; j++) {
            const int id = b->ids[(size_t)i * b->cap_t + j];
            ids[i * T + j] = id;
            if (want_x)
                (*x)->data[((size_t)i * T + j) * V + id] = 1;
            for (int r = 0; r < rows; r++)
                (*mask)->data[((size_t)i * rows + r) * T + j] =
                    j >= b->len[i] || (noself && r == j) ? -INFINITY : 0;
        }
    return ids;
}

qkv_status qkv_ablate_forward(qkv_ablate_model *m, qkv_tape *t, const qkv_coref_batch *b,
                              qkv_ablate_out *out)
{
    if (out == NULL)
        return qkv_tape_fail(t, QKV_ERR_ARG, "ablate: no place for the output");
    memset(out, 0, sizeof *out);
    if (m == NULL || b == NULL || b->B < 1)
        return qkv_tape_fail(t, QKV_ERR_ARG, "ablate: no model, or an empty batch");
    const qkv_ablate_config *c = &m->cfg;
    const int B = b->B, T = b->T, V = c->vocab;
    const int want_x = c->kind == QKV_ABLATE_NO_V || c->kind == QKV_ABLATE_BILINEAR;
    qkv_tensor *x, *mask;
    const int *ids = pack(t, b, V, want_x, c->kind == QKV_ABLATE_SHARED_QK_NOSELF, &x, &mask);
    if (ids == NULL)
        return qkv_tape_status(t);
    const int shape[2] = {B, T};
    qkv_tensor *s;
    if (c->kind == QKV_ABLATE_BILINEAR) { /* S[i,j] = M[id_i, id_j] = (X·M)·Xᵀ */
        s = qkv_matmul_nt(t, qkv_gather(t, m->m, ids, 2, shape), x);
    } else {
        qkv_tensor *q = qkv_gather(t, m->wq, ids, 2, shape);
        qkv_tensor *k = m->wk == m->wq ? q : qkv_gather(t, m->wk, ids, 2, shape);
        double scale = 1 / sqrt((double)c->d_k);
        if (c->kind == QKV_ABLATE_BASE)
            scale *= log(c->base); /* b^S = e^(S·ln b) */
        s = qkv_scale(t, qkv_matmul_nt(t, q, k), scale);
    }
    qkv_tensor *a = qkv_softmax(t, qkv_mask(t, s, mask));
    qkv_tensor *v = c->kind == QKV_ABLATE_NO_V ? x : qkv_gather(t, m->wv, ids, 2, shape);
    out->values = qkv_matmul(t, a, v); /* (B,T,d_v) */
    out->f.scores = s;
    out->f.attn = a;
    out->f.logits = qkv_matmul(t, qkv_pick_rows(t, out->values, b->query), m->wo);
    out->f.loss = qkv_cross_entropy(t, out->f.logits, b->target);
    return qkv_tape_status(t);
}

qkv_status qkv_ablate_train_step(qkv_ablate_model *m, qkv_optim *o, qkv_tape *t,
                                 const qkv_coref_batch *b, qkv_ablate_out *out)
{
    if (o == NULL || t == NULL)
        return t != NULL ? qkv_tape_fail(t, QKV_ERR_ARG, "ablate: no optimizer") : QKV_ERR_ARG;
    qkv_optim_zero_grad(o);
    qkv_tape_reset(t);
    qkv_tape_set_grad(t, 1);
    qkv_status s = qkv_ablate_forward(m, t, b, out);
    if (s == QKV_OK)
        s = qkv_backward(t, out->f.loss);
    if (s != QKV_OK)
        return s;
    if (!isfinite(out->f.loss->data[0]))
        return QKV_ERR_NUMERIC;
    return qkv_optim_step(o);
}

qkv_status qkv_ablate_evaluate(qkv_ablate_model *m, qkv_tape *t, qkv_coref_batch *b,
                               const qkv_coref_example *ex, int n, qkv_ablate_eval *out)
{
    double loss = 0, ante = 0, self = 0;
    int correct = 0, count = 0;
    const int old = qkv_tape_set_grad(t, 0);
    qkv_status s = QKV_OK;
    for (int i = 0; i < n && s == QKV_OK;) {
        qkv_coref_batch_clear(b);
        for (; i < n && b->B < b->cap_b; i++)
            qkv_coref_batch_add(b, ex[i].ids, ex[i].len, ex[i].pronoun, ex[i].target,
                                ex[i].antecedent);
        qkv_ablate_out f;
        qkv_tape_reset(t);
        if ((s = qkv_ablate_forward(m, t, b, &f)) != QKV_OK)
            break;
        const int T = b->T;
        for (int j = 0; j < b->B; j++) {
            const qkv_real *row = f.f.attn->data + ((size_t)j * T + b->query[j]) * T;
            for (int k = 0; k < b->len[j]; k++)
                if (b->ids[(size_t)j * b->cap_t + k] == b->mark[j])
                    ante += row[k];
            self += row[b->query[j]];
            correct += qkv_coref_predict(&f.f, j, NULL) == b->target[j];
        }
        loss += f.f.loss->data[0] * b->B;
        count += b->B;
    }
    qkv_tape_set_grad(t, old);
    out->n = count;
    out->loss = count ? loss / count : 0;
    out->acc = count ? (double)correct / count : 0;
    out->antecedent = count ? ante / count : 0;
    out->self = count ? self / count : 0;
    return s;
}

/* ---- two roles, two heads ----------------------------------------------- */

const char *const qkv_roles_names[QKV_ROLES_VARIANTS] = {"full", "no-v", "no-v-concat"};

int qkv_roles_parse(const char *name, qkv_roles_kind *kind)
{
    for (int i = 0; name != NULL && kind != NULL && i < QKV_ROLES_VARIANTS; i++)
        if (strcmp(name, qkv_roles_names[i]) == 0) {
            *kind = (qkv_roles_kind)i;
            return 0;
        }
    return -1;
}

void qkv_roles_sentence(int pair, int *ids, int *cls_a, int *cls_b)
{
    const int C = qkv_coref_classes(); /* 12 names: pair = a·11 + (b's rank among the others) */
    const int a = pair / (C - 1), r = pair % (C - 1), b = r < a ? r : r + 1;
    ids[0] = qkv_coref_name_id(a);
    ids[1] = qkv_coref_word_id("喜欢");
    ids[2] = qkv_coref_name_id(b);
    ids[3] = qkv_coref_word_id("。");
    *cls_a = a;
    *cls_b = b;
}

void qkv_roles_split(uint64_t seed, int *pairs)
{
    for (int i = 0; i < QKV_ROLES_PAIRS; i++)
        pairs[i] = i;
    qkv_rng g;
    qkv_rng_seed(&g, seed);
    qkv_rng_shuffle(&g, pairs, QKV_ROLES_PAIRS, sizeof *pairs);
}

void qkv_roles_model_free(qkv_roles_model *m)
{
    if (m == NULL)
        return;
    qkv_params_free(m->list);
    free(m);
}

qkv_roles_model *qkv_roles_model_new(qkv_roles_kind kind, uint64_t seed, qkv_error *err)
{
    if ((unsigned)kind >= QKV_ROLES_VARIANTS) {
        qkv_error_set(err, QKV_ERR_ARG, "roles: no variant %d", (int)kind);
        return NULL;
    }
    qkv_roles_model *m = calloc(1, sizeof *m);
    if (m == NULL || (m->list = qkv_params_new(seed, err)) == NULL) {
        free(m);
        if (err != NULL && err->status == QKV_OK)
            qkv_error_set(err, QKV_ERR_NOMEM, "roles: out of memory");
        return NULL;
    }
    m->kind = kind;
    const int V = qkv_coref_vocab_size(), C = qkv_coref_classes(), D = QKV_ROLES_D;
    const int dh = D / QKV_ROLES_HEADS;
    const int width = kind == QKV_ROLES_NO_V_CONCAT ? QKV_ROLES_HEADS * D : D;
    const qkv_init unit = {QKV_INIT_NORMAL, 0, 1}, proj = {QKV_INIT_NORMAL, 0, 1 / sqrt(D)};
    qkv_tensor *last = m->emb = qkv_params_add(m->list, "emb", 2, (const int[]){V, D}, unit, err);
    if (!qkv_tensor_is_nil(last))
        last = m->pos = qkv_params_add(m->list, "pos", 2, (const int[]){QKV_ROLES_T, D}, unit, err);
    for (int h = 0; h < QKV_ROLES_HEADS && !qkv_tensor_is_nil(last); h++) {
        char name[16];
        snprintf(name, sizeof name, "wq%d", h);
        last = m->wq[h] = qkv_params_add(m->list, name, 2, (const int[]){D, dh}, proj, err);
        snprintf(name, sizeof name, "wk%d", h);
        if (!qkv_tensor_is_nil(last))
            last = m->wk[h] = qkv_params_add(m->list, name, 2, (const int[]){D, dh}, proj, err);
        snprintf(name, sizeof name, "wv%d", h);
        if (!qkv_tensor_is_nil(last) && kind == QKV_ROLES_FULL)
            last = m->wv[h] = qkv_params_add(m->list, name, 2, (const int[]){D, dh}, proj, err);
    }
    const qkv_init read = {QKV_INIT_NORMAL, 0, 1 / sqrt((double)width)};
    if (!qkv_tensor_is_nil(last))
        last = m->read_a = qkv_params_add(m->list, "read_a", 2, (const int[]){width, C}, read, err);
    if (!qkv_tensor_is_nil(last))
        last = m->read_b = qkv_params_add(m->list, "read_b", 2, (const int[]){width, C}, read, err);
    if (qkv_tensor_is_nil(last)) {
        qkv_roles_model_free(m);
        return NULL;
    }
    return m;
}

qkv_tensor *qkv_roles_forward(qkv_roles_model *m, qkv_tape *t, const int *pairs, int n,
                              qkv_tensor **out_a, qkv_tensor **out_b)
{
    const int T = QKV_ROLES_T, D = QKV_ROLES_D, H = QKV_ROLES_HEADS;
    int *ids = qkv_tape_alloc(t, sizeof *ids * (size_t)n * T);
    int *cls = qkv_tape_alloc(t, sizeof *cls * 2 * (size_t)n);
    int *last = qkv_tape_alloc(t, sizeof *last * (size_t)n);
    if (m == NULL || ids == NULL || cls == NULL || last == NULL)
        return qkv_tape_fail(t, QKV_ERR_ARG, "roles: no model, or out of memory"), qkv_nil();
    for (int i = 0; i < n; i++) {
        qkv_roles_sentence(pairs[i], ids + i * T, &cls[i], &cls[n + i]);
        last[i] = T - 1;
    }
    /* x = E[token] + P[position]: [n,T,D]; the query is the last position */
    qkv_tensor *x = qkv_add(t, qkv_gather(t, m->emb, ids, 2, (const int[]){n, T}), m->pos);
    qkv_tensor *xq = qkv_reshape(t, qkv_pick_rows(t, x, last), 3, (const int[]){n, 1, D});
    qkv_tensor *heads[QKV_ROLES_HEADS], *sum = NULL;
    for (int h = 0; h < H; h++) {
        qkv_tensor *s = qkv_matmul_nt(t, qkv_matmul(t, xq, m->wq[h]), qkv_matmul(t, x, m->wk[h]));
        qkv_tensor *a = qkv_softmax(t, qkv_scale(t, s, 1 / sqrt((double)(D / H)))); /* [n,1,T] */
        qkv_tensor *v = m->kind == QKV_ROLES_FULL ? qkv_matmul(t, x, m->wv[h]) : x;
        heads[h] = qkv_matmul(t, a, v); /* [n,1,dh] or [n,1,D] */
        sum = h == 0 ? heads[0] : qkv_add(t, sum, heads[h]);
    }
    qkv_tensor *o = m->kind == QKV_ROLES_NO_V ? sum : qkv_concat(t, H, heads, 2);
    o = qkv_reshape(t, o, 2, (const int[]){n, o->ndim == 3 ? o->shape[2] : 1});
    *out_a = qkv_matmul(t, o, m->read_a);
    *out_b = qkv_matmul(t, o, m->read_b);
    return qkv_add(t, qkv_cross_entropy(t, *out_a, cls), qkv_cross_entropy(t, *out_b, cls + n));
}

qkv_status qkv_roles_train_step(qkv_roles_model *m, qkv_optim *o, qkv_tape *t, const int *pairs,
                                int n, double *loss)
{
    if (o == NULL || t == NULL)
        return t != NULL ? qkv_tape_fail(t, QKV_ERR_ARG, "roles: no optimizer") : QKV_ERR_ARG;
    qkv_optim_zero_grad(o);
    qkv_tape_reset(t);
    qkv_tape_set_grad(t, 1);
    qkv_tensor *a, *b, *l = qkv_roles_forward(m, t, pairs, n, &a, &b);
    qkv_status s = qkv_tape_status(t);
    if (s == QKV_OK)
        s = qkv_backward(t, l);
    if (s != QKV_OK)
        return s;
    if (loss != NULL)
        *loss = l->data[0];
    if (!isfinite(l->data[0]))
        return QKV_ERR_NUMERIC;
    return qkv_optim_step(o);
}

/* The argmax of row i of logits [n, C]. */
static int argmax_row(const qkv_tensor *logits, int i)
{
    const int C = logits->shape[1];
    const qkv_real *r = logits->data + (size_t)i * C;
    int best = 0;
    for (int c = 1; c < C; c++)
        if (r[c] > r[best])
            best = c;
    return best;
}

qkv_status qkv_roles_accuracy(qkv_roles_model *m, qkv_tape *t, const int *pairs, int n,
                              double *acc_a, double *acc_b, double *acc_both)
{
    const int old = qkv_tape_set_grad(t, 0);
    qkv_tape_reset(t);
    qkv_tensor *la, *lb;
    qkv_roles_forward(m, t, pairs, n, &la, &lb);
    qkv_status s = qkv_tape_status(t);
    int ra = 0, rb = 0, both = 0;
    for (int i = 0; s == QKV_OK && i < n; i++) {
        int ids[QKV_ROLES_T], ca, cb;
        qkv_roles_sentence(pairs[i], ids, &ca, &cb);
        const int ok_a = argmax_row(la, i) == ca, ok_b = argmax_row(lb, i) == cb;
        ra += ok_a, rb += ok_b, both += ok_a && ok_b;
    }
    qkv_tape_set_grad(t, old);
    if (acc_a != NULL)
        *acc_a = n > 0 ? (double)ra / n : 0;
    if (acc_b != NULL)
        *acc_b = n > 0 ? (double)rb / n : 0;
    if (acc_both != NULL)
        *acc_both = n > 0 ? (double)both / n : 0;
    return s;
}
