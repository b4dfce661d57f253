/*
 * model.c - the coreference model: batches, weights, the forward pass and
 * one training step.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "apps/coref/model.h"
#include "qkv/rng.h"
#include "util/util.h"

/* ------------------------------------------------------------------------ */
/* batches                                                                  */

qkv_coref_batch *qkv_coref_batch_new(int cap_b, int cap_t, qkv_error *err)
{
    if (cap_b < 1 || cap_t < 1) {
        qkv_error_set(err, QKV_ERR_ARG, "batch: capacity %d x %d: both must be at least 1", cap_b,
                      cap_t);
        return NULL;
    }
    qkv_coref_batch *b = qkv_calloc(1, sizeof *b);
    if (b == NULL) {
        qkv_error_set(err, QKV_ERR_NOMEM, "batch: out of memory");
        return NULL;
    }
    b->cap_b = cap_b;
    b->cap_t = cap_t;
    b->ids = qkv_calloc((size_t)cap_b * (size_t)cap_t, sizeof *b->ids);
    b->len = qkv_calloc((size_t)cap_b, sizeof *b->len);
    b->query = qkv_calloc((size_t)cap_b, sizeof *b->query);
    b->target = qkv_calloc((size_t)cap_b, sizeof *b->target);
    b->mark = qkv_calloc((size_t)cap_b, sizeof *b->mark);
    if (!b->ids || !b->len || !b->query || !b->target || !b->mark) {
        qkv_coref_batch_free(b);
        qkv_error_set(err, QKV_ERR_NOMEM, "batch: out of memory for %d x %d tokens", cap_b, cap_t);
        return NULL;
    }
    return b;
}

void qkv_coref_batch_free(qkv_coref_batch *b)
{
    if (b == NULL)
        return;
    free(b->ids);
    free(b->len);
    free(b->query);
    free(b->target);
    free(b->mark);
    free(b);
}

void qkv_coref_batch_clear(qkv_coref_batch *b)
{
    if (b == NULL)
        return;
    b->B = 0;
    b->T = 0;
}

qkv_status qkv_coref_batch_add(qkv_coref_batch *b, const int *ids, int len, int query, int target,
                               int mark)
{
    if (b == NULL || ids == NULL || b->B >= b->cap_b || len < 1 || len > b->cap_t || query < 0 ||
        query >= len)
        return QKV_ERR_ARG;
    int *row = b->ids + (size_t)b->B * b->cap_t;
    memcpy(row, ids, sizeof *row * (size_t)len);
    memset(row + len, 0, sizeof *row * (size_t)(b->cap_t - len));
    b->len[b->B] = len;
    b->query[b->B] = query;
    b->target[b->B] = target;
    b->mark[b->B] = mark;
    b->B++;
    if (len > b->T)
        b->T = len;
    return QKV_OK;
}

/* ------------------------------------------------------------------------ */
/* model                                                                    */

static void fill_normal(qkv_rng *g, qkv_tensor *w, double std)
{
    for (size_t i = 0; i < w->numel; i++)
        w->data[i] = (qkv_real)qkv_rng_normalvariate(g, 0, std);
}

qkv_coref_model *qkv_coref_model_alloc(const qkv_coref_config *cfg, qkv_error *err)
{
    if (cfg == NULL || cfg->vocab < 1 || cfg->d_k < 1 || cfg->d_k > QKV_COREF_MAX_DK ||
        cfg->classes < 1 || !(cfg->init_std >= 0 && cfg->init_std <= QKV_COREF_MAX_INIT_STD)) {
        qkv_error_set(err, QKV_ERR_ARG,
                      "model: vocab and classes must be at least 1, d_k from 1 to %d, and "
                      "init_std from 0 to %d",
                      QKV_COREF_MAX_DK, QKV_COREF_MAX_INIT_STD);
        return NULL;
    }
    qkv_coref_model *m = qkv_calloc(1, sizeof *m);
    if (m == NULL) {
        qkv_error_set(err, QKV_ERR_NOMEM, "model: out of memory");
        return NULL;
    }
    m->cfg = *cfg;
    static const char *names[QKV_COREF_PARAMS] = {"wq", "wk", "wv", "wo"};
    const int qkv_shape[2] = {cfg->vocab, cfg->d_k}, o_shape[2] = {cfg->d_k, cfg->classes};
    const qkv_init zeros = {QKV_INIT_ZEROS, 0, 0};
    m->list = qkv_params_new(cfg->seed, err);
    for (int i = 0; m->list != NULL && i < QKV_COREF_PARAMS; i++) {
        m->params[i] =
            qkv_params_add(m->list, names[i], 2, i < 3 ? qkv_shape : o_shape, zeros, err);
        if (qkv_tensor_is_nil(m->params[i])) {
            qkv_coref_model_free(m);
            return NULL;
        }
    }
    if (m->list == NULL) {
        qkv_coref_model_free(m);
        return NULL;
    }
    m->wq = m->params[0];
    m->wk = m->params[1];
    m->wv = m->params[2];
    m->wo = m->params[3];
    return m;
}

qkv_coref_model *qkv_coref_model_new_abi(unsigned abi, const qkv_coref_config *cfg, qkv_error *err)
{
    if (!qkv_abi_ok(abi, err))
        return NULL;
    qkv_coref_model *m = qkv_coref_model_alloc(cfg, err);
    if (m == NULL)
        return NULL;
    qkv_rng g;
    qkv_rng_seed(&g, cfg->seed);
    fill_normal(&g, m->wq, cfg->init_std);
    fill_normal(&g, m->wk, cfg->init_std);
    fill_normal(&g, m->wv, cfg->init_std);
    fill_normal(&g, m->wo, 1 / sqrt((double)cfg->d_k));
    return m;
}

void qkv_coref_model_free(qkv_coref_model *m)
{
    if (m == NULL)
        return;
    qkv_params_free(m->list); /* and with it the tensors */
    free(m);
}

/* Copies the batch's ids into a contiguous (B,T) array on the tape, and
 * builds the (B,1,T) padding mask: 0 for real keys, -inf for padding. */
static int *pack_batch(qkv_tape *t, const qkv_coref_batch *b, qkv_tensor **mask)
{
    int *ids = qkv_tape_alloc(t, sizeof *ids * (size_t)b->B * (size_t)b->T);
    *mask = qkv_tape_tensor(t, 3, (const int[]){b->B, 1, b->T}, 0); /* (B,1,T) */
    if (ids == NULL || qkv_tensor_is_nil(*mask))
        return NULL;
    qkv_real *md = (*mask)->data;
    for (int i = 0; i < b->B; i++) {
        const int *src = b->ids + (size_t)i * b->cap_t;
        int *dst = ids + (size_t)i * b->T;
        qkv_real *mrow = md + (size_t)i * b->T;
        for (int j = 0; j < b->T; j++) {
            dst[j] = src[j];
            mrow[j] = j < b->len[i] ? 0 : -INFINITY;
        }
    }
    return ids;
}

qkv_status qkv_coref_forward(qkv_coref_model *m, qkv_tape *t, const qkv_coref_batch *b,
                             qkv_coref_out *f)
{
    if (f == NULL)
        return qkv_tape_fail(t, QKV_ERR_ARG, "model: no place for the output");
    memset(f, 0, sizeof *f);
    if (m == NULL || b == NULL)
        return qkv_tape_fail(t, QKV_ERR_ARG, "model: no model or no batch");
    if (b->B < 1)
        return qkv_tape_fail(t, QKV_ERR_ARG, "model: empty batch");
    qkv_tensor *mask;
    int *ids = pack_batch(t, b, &mask);
    if (ids == NULL)
        return qkv_tape_status(t);
    /* Q, K, V = rows of Wq, Wk, Wv (one-hot·W), then softmax(Q·Kᵀ/√d_k +
     * mask)·V at the pronoun's row, fused: the same numbers as three
     * qkv_gather, qkv_matmul_nt, qkv_scale, qkv_mask, qkv_softmax,
     * qkv_matmul and qkv_pick_rows in a row, without the rows of A·V that
     * nothing reads */
    qkv_attention_parts parts = {NULL, NULL}; /* none: the pronoun's rows alone */
    double scale = m->cfg.scaled ? 1 / sqrt((double)m->cfg.d_k) : 1;
    qkv_tensor *h = qkv_embed_attention_rows(t, m->wq, m->wk, m->wv, ids, b->B, b->T, mask, scale,
                                             b->query, m->rows_only ? NULL : &parts); /* (B,d_k) */
    f->scores = parts.scores;                                                         /* (B,T,T) */
    f->attn = parts.attn;                                                             /* (B,T,T) */
    f->logits = qkv_matmul(t, h, m->wo);                                              /* (B,C) */
    f->loss = qkv_cross_entropy(t, f->logits, b->target);                             /* () */
    return qkv_tape_status(t);
}

qkv_status qkv_coref_train_step(qkv_coref_model *m, qkv_optim *o, qkv_tape *t,
                                const qkv_coref_batch *b, qkv_coref_out *f)
{
    if (o == NULL || t == NULL || f == NULL)
        return t != NULL ? qkv_tape_fail(t, QKV_ERR_ARG, "train step: no optimizer or no output")
                         : QKV_ERR_ARG;
    qkv_optim_zero_grad(o);
    qkv_tape_reset(t);
    qkv_tape_set_grad(t, 1);
    qkv_status s = qkv_coref_forward(m, t, b, f);
    if (s == QKV_OK)
        s = qkv_backward(t, f->loss);
    if (s != QKV_OK)
        return s;
    if (!isfinite(f->loss->data[0]))
        return QKV_ERR_NUMERIC;
    return qkv_optim_step(o);
}
