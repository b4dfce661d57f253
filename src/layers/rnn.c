/*
 * rnn.c - the recurrent cells: Elman RNN, LSTM and GRU, one time step each,
 * composed from the ops (so every gradient is the ops' own, and the
 * gradient checks cover the unrolled cells end to end).
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "layers/internal.h"

/* The k·H-wide weights and biases of a cell, all U(-1/√H, 1/√H). */
static qkv_status cell_params(qkv_params *p, const char *prefix, int in, int hidden, int k,
                              qkv_tensor **wx, qkv_tensor **wh, qkv_tensor **b1,
                              const char *b1_name, qkv_tensor **b2, const char *b2_name,
                              qkv_error *err)
{
    const double bound = 1 / sqrt((double)hidden);
    const qkv_init u = {QKV_INIT_UNIFORM, -bound, bound};
    qkv_status s = qkv_layer_param(wx, p, prefix, "wx", 2, (const int[]){in, k * hidden}, u, err);
    if (s == QKV_OK)
        s = qkv_layer_param(wh, p, prefix, "wh", 2, (const int[]){hidden, k * hidden}, u, err);
    if (s == QKV_OK)
        s = qkv_layer_param(b1, p, prefix, b1_name, 1, (const int[]){k * hidden}, u, err);
    if (s == QKV_OK && b2 != NULL)
        s = qkv_layer_param(b2, p, prefix, b2_name, 1, (const int[]){k * hidden}, u, err);
    return s;
}

static qkv_status check_sizes(const char *what, int in, int hidden, qkv_error *err)
{
    if (in < 1 || hidden < 1)
        return qkv_error_set(err, QKV_ERR_ARG, "%s: in and hidden must be at least 1", what);
    return QKV_OK;
}

/* Nonzero when h is neither NULL (a zero state) nor a [batch, hidden]
 * tensor; then sx and sh hold the shapes of x and h ("none" for NULL). */
static int bad_state(const qkv_tensor *x, const qkv_tensor *h, int batch, int hidden,
                     char (*sx)[64], char (*sh)[64])
{
    if (h == NULL ||
        (!qkv_tensor_is_nil(h) && h->ndim == 2 && h->shape[0] == batch && h->shape[1] == hidden))
        return 0;
    qkv_shape_str(x, *sx, sizeof *sx);
    qkv_shape_str(h, *sh, sizeof *sh);
    return 1;
}

/* Checks that xw is [B, k·H] and h (if any) [B, H]; records the error. */
static int check_step(qkv_tape *t, const char *what, const qkv_tensor *xw, int kh,
                      const qkv_tensor *h, int hidden)
{
    if (qkv_tape_status(t) != QKV_OK)
        return 0;
    char sx[64], sh[64] = "none";
    const int ok = !qkv_tensor_is_nil(xw) && xw->ndim == 2 && xw->shape[1] == kh;
    if (!ok || bad_state(xw, h, ok ? xw->shape[0] : -1, hidden, &sx, &sh)) {
        qkv_shape_str(xw, sx, sizeof sx);
        qkv_tape_fail(t, QKV_ERR_SHAPE,
                      "%s: the input projection %s must be [B,%d] and the state %s [B,%d]", what,
                      sx, kh, sh, hidden);
        return 0;
    }
    return 1;
}

/* xw + h·W_h + b, or xw + b without a state. */
static qkv_tensor *pre(qkv_tape *t, qkv_tensor *xw, qkv_tensor *h, qkv_tensor *wh, qkv_tensor *b)
{
    qkv_tensor *z = qkv_add(t, xw, b);
    return h != NULL ? qkv_add(t, z, qkv_matmul(t, h, wh)) : z;
}

/* Columns [i·H, (i+1)·H) of z [B, k·H]. */
static qkv_tensor *part(qkv_tape *t, qkv_tensor *z, int i, int hidden)
{
    return qkv_slice(t, z, 1, i * hidden, hidden);
}

/* Every step's x·W_x of a sequence x [T,B,in] in one product, as [T·B,
 * cols] (step s at rows s·B); sets *steps and *batch. Records the error
 * and returns nil for a sequence of another shape. */
static qkv_tensor *project_steps(qkv_tape *t, const char *what, qkv_tensor *x, int in,
                                 qkv_tensor *wx, int *steps, int *batch)
{
    if (qkv_tape_status(t) != QKV_OK)
        return qkv_nil();
    if (qkv_tensor_is_nil(x) || x->ndim != 3 || x->shape[2] != in) {
        char sx[64];
        qkv_shape_str(x, sx, sizeof sx);
        qkv_tape_fail(t, QKV_ERR_SHAPE, "%s: the sequence %s must be [T,B,%d]", what, sx, in);
        return qkv_nil();
    }
    if ((size_t)x->shape[0] * (size_t)x->shape[1] > INT_MAX) {
        qkv_tape_fail(t, QKV_ERR_SHAPE, "%s: T·B = %zu rows is too many", what,
                      (size_t)x->shape[0] * (size_t)x->shape[1]);
        return qkv_nil();
    }
    *steps = x->shape[0];
    *batch = x->shape[1];
    return qkv_reshape(t, qkv_affine(t, x, wx, NULL), 2,
                       (const int[]){*steps * *batch, wx->shape[1]});
}

/* ---- Elman -------------------------------------------------------------- */

qkv_status qkv_rnn_init(qkv_rnn *r, qkv_params *p, const char *prefix, int in, int hidden,
                        qkv_rnn_act act, qkv_error *err)
{
    if (r == NULL || (act != QKV_RNN_TANH && act != QKV_RNN_LINEAR))
        return qkv_error_set(err, QKV_ERR_ARG, "rnn: no cell, or an unknown activation");
    qkv_status s = check_sizes("rnn", in, hidden, err);
    if (s != QKV_OK)
        return s;
    memset(r, 0, sizeof *r);
    r->in = in;
    r->hidden = hidden;
    r->act = act;
    return cell_params(p, prefix, in, hidden, 1, &r->wx, &r->wh, &r->b, "b", NULL, NULL, err);
}

qkv_tensor *qkv_rnn_cell_projected(qkv_tape *t, const qkv_rnn *r, qkv_tensor *xw, qkv_tensor *h)
{
    if (r == NULL)
        return qkv_tape_fail(t, QKV_ERR_ARG, "rnn: no cell"), qkv_nil();
    if (!check_step(t, "rnn", xw, r->hidden, h, r->hidden))
        return qkv_nil();
    qkv_tensor *z = pre(t, xw, h, r->wh, r->b);
    return r->act == QKV_RNN_TANH ? qkv_tanh(t, z) : z;
}

qkv_tensor *qkv_rnn_cell(qkv_tape *t, const qkv_rnn *r, qkv_tensor *x, qkv_tensor *h)
{
    if (r == NULL)
        return qkv_tape_fail(t, QKV_ERR_ARG, "rnn: no cell"), qkv_nil();
    return qkv_rnn_cell_projected(t, r, qkv_matmul(t, x, r->wx), h);
}

qkv_tensor *qkv_rnn_forward(qkv_tape *t, const qkv_rnn *r, qkv_tensor *x, qkv_tensor *h0,
                            qkv_tensor **states)
{
    if (r == NULL)
        return qkv_tape_fail(t, QKV_ERR_ARG, "rnn: no cell"), qkv_nil();
    if (qkv_tape_status(t) != QKV_OK)
        return qkv_nil();
    char sx[64], sh[64] = "none";
    const int ok = !qkv_tensor_is_nil(x) && x->ndim == 3 && x->shape[2] == r->in;
    if (!ok || bad_state(x, h0, ok ? x->shape[1] : -1, r->hidden, &sx, &sh)) {
        qkv_shape_str(x, sx, sizeof sx);
        qkv_tape_fail(t, QKV_ERR_SHAPE,
                      "rnn: the sequence %s must be [T,B,%d] and the first state %s [B,%d]", sx,
                      r->in, sh, r->hidden);
        return qkv_nil();
    }
    const int T = x->shape[0], B = x->shape[1], H = r->hidden;
    /* every step's x·W_x + b in one product, then the recurrence as one node */
    qkv_tensor *y =
        qkv_rnn_scan(t, qkv_affine(t, x, r->wx, r->b), r->wh, h0, r->act == QKV_RNN_TANH);
    for (int s = 0; states != NULL && s < T; s++)
        states[s] = qkv_reshape(t, qkv_slice(t, y, 0, s, 1), 2, (const int[]){B, H});
    qkv_tensor *h = states != NULL
                        ? states[T - 1]
                        : qkv_reshape(t, qkv_slice(t, y, 0, T - 1, 1), 2, (const int[]){B, H});
    return qkv_tape_status(t) == QKV_OK ? h : qkv_nil();
}

/* ---- LSTM --------------------------------------------------------------- */

qkv_status qkv_lstm_init(qkv_lstm *l, qkv_params *p, const char *prefix, int in, int hidden,
                         qkv_error *err)
{
    if (l == NULL)
        return qkv_error_set(err, QKV_ERR_ARG, "lstm: no cell");
    qkv_status s = check_sizes("lstm", in, hidden, err);
    if (s != QKV_OK)
        return s;
    memset(l, 0, sizeof *l);
    l->in = in;
    l->hidden = hidden;
    return cell_params(p, prefix, in, hidden, 4, &l->wx, &l->wh, &l->b, "b", NULL, NULL, err);
}

qkv_lstm_state qkv_lstm_cell_projected(qkv_tape *t, const qkv_lstm *l, qkv_tensor *xw,
                                       const qkv_lstm_state *s)
{
    qkv_lstm_state out = {qkv_nil(), qkv_nil()};
    if (l == NULL) {
        qkv_tape_fail(t, QKV_ERR_ARG, "lstm: no cell");
        return out;
    }
    const int H = l->hidden;
    if (!check_step(t, "lstm", xw, 4 * H, s != NULL ? s->h : NULL, H) ||
        (s != NULL && !check_step(t, "lstm (cell state)", xw, 4 * H, s->c, H)))
        return out;
    qkv_tensor *z = pre(t, xw, s != NULL ? s->h : NULL, l->wh, l->b);
    qkv_tensor *i = qkv_sigmoid(t, part(t, z, 0, H)), *g = qkv_tanh(t, part(t, z, 2, H));
    qkv_tensor *o = qkv_sigmoid(t, part(t, z, 3, H));
    qkv_tensor *c = qkv_mul(t, i, g);
    if (s != NULL)
        c = qkv_add(t, qkv_mul(t, qkv_sigmoid(t, part(t, z, 1, H)), s->c), c);
    out.h = qkv_mul(t, o, qkv_tanh(t, c));
    out.c = c;
    if (qkv_tape_status(t) != QKV_OK)
        out.h = out.c = qkv_nil();
    return out;
}

qkv_lstm_state qkv_lstm_cell(qkv_tape *t, const qkv_lstm *l, qkv_tensor *x, const qkv_lstm_state *s)
{
    if (l == NULL) {
        qkv_tape_fail(t, QKV_ERR_ARG, "lstm: no cell");
        return (qkv_lstm_state){qkv_nil(), qkv_nil()};
    }
    return qkv_lstm_cell_projected(t, l, qkv_matmul(t, x, l->wx), s);
}

qkv_lstm_state qkv_lstm_forward(qkv_tape *t, const qkv_lstm *l, qkv_tensor *x,
                                const qkv_lstm_state *s0, qkv_lstm_state *states)
{
    qkv_lstm_state s = {qkv_nil(), qkv_nil()};
    if (l == NULL) {
        qkv_tape_fail(t, QKV_ERR_ARG, "lstm: no cell");
        return s;
    }
    int T = 0, B = 0;
    qkv_tensor *xw = project_steps(t, "lstm", x, l->in, l->wx, &T, &B);
    for (int i = 0; i < T && qkv_tape_status(t) == QKV_OK; i++) {
        s = qkv_lstm_cell_projected(t, l, qkv_slice(t, xw, 0, i * B, B), i > 0 ? &s : s0);
        if (states != NULL)
            states[i] = s;
    }
    return s;
}

/* ---- GRU ---------------------------------------------------------------- */

qkv_status qkv_gru_init(qkv_gru *g, qkv_params *p, const char *prefix, int in, int hidden,
                        qkv_error *err)
{
    if (g == NULL)
        return qkv_error_set(err, QKV_ERR_ARG, "gru: no cell");
    qkv_status s = check_sizes("gru", in, hidden, err);
    if (s != QKV_OK)
        return s;
    memset(g, 0, sizeof *g);
    g->in = in;
    g->hidden = hidden;
    return cell_params(p, prefix, in, hidden, 3, &g->wx, &g->wh, &g->bx, "bx", &g->bh, "bh", err);
}

qkv_tensor *qkv_gru_cell_projected(qkv_tape *t, const qkv_gru *g, qkv_tensor *xw, qkv_tensor *h)
{
    if (g == NULL)
        return qkv_tape_fail(t, QKV_ERR_ARG, "gru: no cell"), qkv_nil();
    const int H = g->hidden;
    if (!check_step(t, "gru", xw, 3 * H, h, H))
        return qkv_nil();
    qkv_tensor *a = qkv_add(t, xw, g->bx);
    /* u = h·W_h + b_h; with a zero state, b_h alone (broadcast over the batch) */
    qkv_tensor *u = h != NULL ? qkv_add(t, qkv_matmul(t, h, g->wh), g->bh) : g->bh;
    qkv_tensor *u_r = h != NULL ? part(t, u, 0, H) : qkv_slice(t, u, 0, 0, H);
    qkv_tensor *u_z = h != NULL ? part(t, u, 1, H) : qkv_slice(t, u, 0, H, H);
    qkv_tensor *u_n = h != NULL ? part(t, u, 2, H) : qkv_slice(t, u, 0, 2 * H, H);
    qkv_tensor *r = qkv_sigmoid(t, qkv_add(t, part(t, a, 0, H), u_r));
    qkv_tensor *z = qkv_sigmoid(t, qkv_add(t, part(t, a, 1, H), u_z));
    qkv_tensor *n = qkv_tanh(t, qkv_add(t, part(t, a, 2, H), qkv_mul(t, r, u_n)));
    /* h' = (1 - z)∘n + z∘h = n + z∘(h - n) */
    qkv_tensor *zh = qkv_mul(t, z, h != NULL ? qkv_sub(t, h, n) : qkv_neg(t, n));
    return qkv_add(t, n, zh);
}

qkv_tensor *qkv_gru_cell(qkv_tape *t, const qkv_gru *g, qkv_tensor *x, qkv_tensor *h)
{
    if (g == NULL)
        return qkv_tape_fail(t, QKV_ERR_ARG, "gru: no cell"), qkv_nil();
    return qkv_gru_cell_projected(t, g, qkv_matmul(t, x, g->wx), h);
}

qkv_tensor *qkv_gru_forward(qkv_tape *t, const qkv_gru *g, qkv_tensor *x, qkv_tensor *h0,
                            qkv_tensor **states)
{
    if (g == NULL)
        return qkv_tape_fail(t, QKV_ERR_ARG, "gru: no cell"), qkv_nil();
    int T = 0, B = 0;
    qkv_tensor *xw = project_steps(t, "gru", x, g->in, g->wx, &T, &B);
    qkv_tensor *h = qkv_nil();
    for (int i = 0; i < T && qkv_tape_status(t) == QKV_OK; i++) {
        h = qkv_gru_cell_projected(t, g, qkv_slice(t, xw, 0, i * B, B), i > 0 ? h : h0);
        if (states != NULL)
            states[i] = h;
    }
    return h;
}
