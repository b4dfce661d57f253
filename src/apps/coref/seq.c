/*
 * seq.c - distance sentences, and the models of the RNN chapter: Elman
 * RNN, LSTM and GRU over the coreference vocabulary, beside the attention
 * model (see seq.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "apps/coref/seq.h"
#include "apps/coref/vocab.h"

/* ---- distance sentences ------------------------------------------------- */

static const char *const activities[] = {"看书", "唱歌", "跳舞", "画画", "跑步"};
#define N_ACT 5

/* The ids of a distance sentence's words, looked up once for a batch: a
 * lookup compares strings along the vocabulary, and a sentence at k = 64
 * has 72 words (looked up word by word, it was 31% of a qkv distance run,
 * in strcmp). */
typedef struct dist_words {
    int today, also, run, comma, he, she, very, love, act[N_ACT];
} dist_words;

static void find_words(dist_words *w)
{
    w->today = qkv_coref_word_id("今天");
    w->also = qkv_coref_word_id("也");
    w->run = qkv_coref_word_id("跑步");
    w->comma = qkv_coref_word_id("，");
    w->he = qkv_coref_word_id("他");
    w->she = qkv_coref_word_id("她");
    w->very = qkv_coref_word_id("很");
    w->love = qkv_coref_word_id("爱");
    for (int i = 0; i < N_ACT; i++)
        w->act[i] = qkv_coref_word_id(activities[i]);
}

static int bad_k(int k)
{
    return k < 0 || k > QKV_DISTANCE_MAX;
}

/* The refusal of a distance out of range (or of no generator or ids). */
static qkv_status k_error(int k, qkv_error *err)
{
    return qkv_error_set(err, QKV_ERR_ARG, "distance: k %d is not in [0, %d]", k, QKV_DISTANCE_MAX);
}

static void sentence(const dist_words *w, int k, qkv_rng *g, int *ids, int *len, int *pronoun,
                     int *target)
{
    const int classes = qkv_coref_classes();
    const int cls = (int)qkv_rng_below(g, (uint64_t)classes), name = qkv_coref_name_id(cls);
    int n = 0;
    ids[n++] = name;
    ids[n++] = w->today;
    if (k % 2 == 1)
        ids[n++] = w->also; /* 小明今天也跑步: the odd filler */
    ids[n++] = w->run;
    for (int i = 0; i < k / 2; i++) {
        ids[n++] = w->comma;
        ids[n++] = w->act[qkv_rng_below(g, N_ACT)];
    }
    ids[n++] = w->comma;
    *pronoun = n;
    ids[n++] = qkv_coref_kind(name) == QKV_COREF_MALE ? w->he : w->she;
    ids[n++] = w->very;
    ids[n++] = w->love;
    ids[n++] = w->act[qkv_rng_below(g, N_ACT)];
    *len = n;
    *target = cls;
}

qkv_status qkv_distance_sentence(int k, qkv_rng *g, int *ids, int *len, int *pronoun, int *target,
                                 qkv_error *err)
{
    if (ids == NULL || g == NULL || bad_k(k))
        return k_error(k, err);
    dist_words w;
    find_words(&w);
    sentence(&w, k, g, ids, len, pronoun, target);
    return QKV_OK;
}

qkv_status qkv_distance_batch(qkv_coref_batch *b, int n, int k, qkv_rng *g, qkv_error *err)
{
    if (b == NULL || n < 1 || n > b->cap_b || k + 8 > b->cap_t)
        return qkv_error_set(err, QKV_ERR_ARG,
                             "distance: %d sentences of %d tokens do not fit the batch", n, k + 8);
    if (g == NULL || bad_k(k))
        return k_error(k, err);
    qkv_coref_batch_clear(b);
    dist_words w;
    find_words(&w);
    for (int i = 0; i < n; i++) {
        int ids[QKV_DISTANCE_MAX + 8], len, pron, target;
        sentence(&w, k, g, ids, &len, &pron, &target);
        if (qkv_coref_batch_add(b, ids, len, pron, target, ids[0]) != QKV_OK)
            return qkv_error_set(err, QKV_ERR_ARG, "distance: cannot add to the batch");
    }
    return QKV_OK;
}

/* ---- models ------------------------------------------------------------- */

static const char *const kind_names[] = {"attention", "rnn", "lstm", "gru"};

const char *qkv_seq_name(qkv_seq_kind k)
{
    return (unsigned)k < 4 ? kind_names[k] : "?";
}

int qkv_seq_parse(const char *s, qkv_seq_kind *k)
{
    for (int i = 0; s != NULL && i < 4; i++)
        if (strcmp(s, kind_names[i]) == 0) {
            *k = (qkv_seq_kind)i;
            return 0;
        }
    return -1;
}

int qkv_seq_default_width(qkv_seq_kind k)
{
    static const int widths[4] = {16, 28, 10, 13};
    return (unsigned)k < 4 ? widths[k] : 0;
}

void qkv_seq_model_free(qkv_seq_model *m)
{
    if (m == NULL)
        return;
    if (m->attn != NULL)
        qkv_coref_model_free(m->attn); /* owns m->list */
    else
        qkv_params_free(m->list);
    free(m);
}

qkv_seq_model *qkv_seq_model_new(const qkv_seq_config *cfg, qkv_error *err)
{
    if (cfg == NULL || (unsigned)cfg->kind >= 4 || cfg->width < 1 || cfg->vocab < 1 ||
        cfg->classes < 1) {
        qkv_error_set(err, QKV_ERR_ARG, "seq: a bad model config");
        return NULL;
    }
    qkv_seq_model *m = calloc(1, sizeof *m);
    if (m == NULL) {
        qkv_error_set(err, QKV_ERR_NOMEM, "seq: out of memory");
        return NULL;
    }
    m->cfg = *cfg;
    if (cfg->kind == QKV_SEQ_ATTENTION) {
        const qkv_coref_config c = {cfg->vocab, cfg->width, cfg->classes, 1, 0.1, cfg->seed};
        if ((m->attn = qkv_coref_model_new(&c, err)) == NULL) {
            free(m);
            return NULL;
        }
        m->list = m->attn->list;
        return m;
    }
    const int V = cfg->vocab, H = cfg->width;
    qkv_status s = (m->list = qkv_params_new(cfg->seed, err)) != NULL ? QKV_OK : QKV_ERR_NOMEM;
    if (s == QKV_OK)
        s = cfg->kind == QKV_SEQ_RNN    ? qkv_rnn_init(&m->rnn, m->list, "rnn", V, H, cfg->act, err)
            : cfg->kind == QKV_SEQ_LSTM ? qkv_lstm_init(&m->lstm, m->list, "lstm", V, H, err)
                                        : qkv_gru_init(&m->gru, m->list, "gru", V, H, err);
    if (s == QKV_OK && cfg->kind == QKV_SEQ_LSTM && isfinite(cfg->forget_bias))
        for (int j = 0; j < H; j++)
            m->lstm.b->data[H + j] = (qkv_real)cfg->forget_bias;
    if (s == QKV_OK) {
        m->wo = qkv_params_add(m->list, "wo", 2, (const int[]){H, cfg->classes},
                               (qkv_init){QKV_INIT_NORMAL, 0, 1 / sqrt((double)H)}, err);
        if (qkv_tensor_is_nil(m->wo))
            s = err != NULL ? err->status : QKV_ERR_NOMEM;
    }
    if (s != QKV_OK) {
        qkv_seq_model_free(m);
        return NULL;
    }
    return m;
}

qkv_tensor *qkv_seq_recurrent_weight(const qkv_seq_model *m)
{
    if (m == NULL)
        return NULL;
    switch (m->cfg.kind) {
    case QKV_SEQ_RNN: return m->rnn.wh;
    case QKV_SEQ_LSTM: return m->lstm.wh;
    case QKV_SEQ_GRU: return m->gru.wh;
    default: return NULL;
    }
}

/* The projection of step j's tokens: rows of the cell's W_x. */
static qkv_tensor *step_input(qkv_tape *t, const qkv_seq_model *m, const qkv_coref_batch *b, int j)
{
    int *ids = qkv_tape_alloc(t, sizeof *ids * (size_t)b->B);
    if (ids == NULL)
        return qkv_nil();
    for (int i = 0; i < b->B; i++)
        ids[i] = b->ids[(size_t)i * b->cap_t + j];
    qkv_tensor *wx = m->cfg.kind == QKV_SEQ_RNN    ? m->rnn.wx
                     : m->cfg.kind == QKV_SEQ_LSTM ? m->lstm.wx
                                                   : m->gru.wx;
    return qkv_gather(t, wx, ids, 1, (const int[]){b->B});
}

qkv_status qkv_seq_forward(qkv_seq_model *m, qkv_tape *t, const qkv_coref_batch *b,
                           qkv_seq_out *out)
{
    if (out == NULL)
        return qkv_tape_fail(t, QKV_ERR_ARG, "seq: no place for the output");
    memset(out, 0, sizeof *out);
    if (m == NULL || b == NULL || b->B < 1)
        return qkv_tape_fail(t, QKV_ERR_ARG, "seq: no model, or an empty batch");
    if (m->cfg.kind == QKV_SEQ_ATTENTION) {
        qkv_coref_out f;
        qkv_status s = qkv_coref_forward(m->attn, t, b, &f);
        out->logits = f.logits;
        out->loss = f.loss;
        return s;
    }
    const int T = b->T, B = b->B, H = m->cfg.width;
    out->h = qkv_tape_alloc(t, sizeof *out->h * (size_t)T);
    qkv_tensor **rows = qkv_tape_alloc(t, sizeof *rows * (size_t)T);
    if (out->h == NULL || rows == NULL)
        return qkv_tape_status(t);
    out->steps = T;
    qkv_lstm_state st = {NULL, NULL};
    for (int j = 0; j < T; j++) {
        qkv_tensor *xw = step_input(t, m, b, j), *prev = j ? out->h[j - 1] : NULL;
        if (m->cfg.kind == QKV_SEQ_RNN) {
            out->h[j] = qkv_rnn_cell_projected(t, &m->rnn, xw, prev);
        } else if (m->cfg.kind == QKV_SEQ_LSTM) {
            st = qkv_lstm_cell_projected(t, &m->lstm, xw, j ? &st : NULL);
            out->h[j] = st.h;
        } else {
            out->h[j] = qkv_gru_cell_projected(t, &m->gru, xw, prev);
        }
        rows[j] = qkv_reshape(t, out->h[j], 3, (const int[]){B, 1, H});
    }
    /* the state at each item's pronoun: stack the steps [B,T,H], pick rows */
    qkv_tensor *all = T > 1 ? qkv_concat(t, T, rows, 1) : rows[0];
    qkv_tensor *h = qkv_pick_rows(t, all, b->query);
    out->logits = qkv_matmul(t, h, m->wo);
    out->loss = qkv_cross_entropy(t, out->logits, b->target);
    return qkv_tape_status(t);
}

qkv_status qkv_seq_train_step(qkv_seq_model *m, qkv_optim *o, qkv_tape *t, const qkv_coref_batch *b,
                              qkv_seq_out *out)
{
    if (m == NULL || o == NULL || t == NULL)
        return t != NULL ? qkv_tape_fail(t, QKV_ERR_ARG, "seq: no model or no optimizer")
                         : QKV_ERR_ARG;
    qkv_params_zero_grad(m->list);
    qkv_tape_reset(t);
    qkv_tape_set_grad(t, 1);
    qkv_status s = qkv_seq_forward(m, t, b, out);
    if (s == QKV_OK)
        s = qkv_backward(t, out->loss);
    if (s != QKV_OK)
        return s;
    if (!isfinite(out->loss->data[0]))
        return QKV_ERR_NUMERIC;
    return qkv_optim_step(o);
}

int qkv_seq_correct(qkv_seq_model *m, qkv_tape *t, const qkv_coref_batch *b)
{
    qkv_seq_out out;
    qkv_tape_reset(t);
    int was = qkv_tape_set_grad(t, 0);
    qkv_status s = qkv_seq_forward(m, t, b, &out);
    qkv_tape_set_grad(t, was);
    if (s != QKV_OK)
        return -1;
    const int C = out.logits->shape[1];
    int right = 0;
    for (int i = 0; i < b->B; i++) {
        const qkv_real *l = out.logits->data + (size_t)i * C;
        int best = 0;
        for (int c = 1; c < C; c++)
            best = l[c] > l[best] ? c : best;
        right += best == b->target[i];
    }
    qkv_tape_reset(t);
    return right;
}
