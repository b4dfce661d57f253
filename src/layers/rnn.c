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
    const qkv_params_mark m0 = qkv_params_mark_get(p); /* undone on a failure */
    qkv_status s = qkv_layer_param(wx, p, prefix, "wx", 2, (const int[]){in, k * hidden}, u, err);
    if (s == QKV_OK)
        s = qkv_layer_param(wh, p, prefix, "wh", 2, (const int[]){hidden, k * hidden}, u, err);
    if (s == QKV_OK)
        s = qkv_layer_param(b1, p, prefix, b1_name, 1, (const int[]){k * hidden}, u, err);
    if (s == QKV_OK && b2 != NULL)
        s = qkv_layer_param(b2, p, prefix, b2_name, 1, (const int[]){k * hidden}, u, err);
    if (s != QKV_OK) { /* nothing of it stays, nor pointers to what was freed */
        qkv_params_undo(p, &m0);
        *wx = *wh = *b1 = NULL;
        if (b2 != NULL)
            *b2 = NULL;
    }
    return s;
}

static qkv_status check_sizes(const char *what, int in, int hidden, qkv_error *err)
{
    if (in < 1 || hidden < 1)
        return qkv_error_set(err, QKV_ERR_ARG, "%s: in %d and hidden %d must be at least 1", what,
                             in, hidden);
    return QKV_OK;
}

/* Nonzero when x is [.., cols] with ndim dimensions (its batch size, the
 * one before cols, in *batch) and each state of states[0..n) is NULL (a
 * zero state) or [*batch, hidden]. Otherwise records a shape error that
 * names what is wrong: x ("the <xname> ... must be [<xshape>,cols]"), or
 * else the first wrong state with the shape it must have and x's ("the
 * first state ... must be [B,H] (batch, hidden) for the sequence ...";
 * "first" when x is a sequence, ndim 3; the LSTM's second state is its
 * cell state). */
static int shapes_ok(qkv_tape *t, const char *what, const char *xname, const char *xshape,
                     const qkv_tensor *x, int ndim, int cols, const qkv_tensor *const *states,
                     int n, int hidden, int *batch)
{
    if (qkv_tape_status(t) != QKV_OK)
        return 0;
    char sx[64], sh[64]; /* formatted only for a message: a cell's step checks every step */
    if (qkv_tensor_is_nil(x) || x->ndim != ndim || x->shape[ndim - 1] != cols) {
        *batch = -1;
        qkv_shape_str(x, sx, sizeof sx);
        qkv_tape_fail(t, QKV_ERR_SHAPE, "%s: the %s %s must be [%s,%d]", what, xname, sx, xshape,
                      cols);
        return 0;
    }
    *batch = x->shape[ndim - 2];
    for (int i = 0; i < n; i++) {
        const qkv_tensor *h = states[i];
        if (h == NULL || (!qkv_tensor_is_nil(h) && h->ndim == 2 && h->shape[0] == *batch &&
                          h->shape[1] == hidden))
            continue;
        qkv_shape_str(x, sx, sizeof sx);
        qkv_shape_str(h, sh, sizeof sh);
        qkv_tape_fail(t, QKV_ERR_SHAPE,
                      "%s: the %s%s %s must be [%d,%d] (batch, hidden) for the %s %s", what,
                      ndim == 3 ? "first " : "", n == 2 && i == 1 ? "cell state" : "state", sh,
                      *batch, hidden, xname, sx);
        return 0;
    }
    return 1;
}

/* Checks that xw is [B, k·H] and h (if any) [B, H]; records the error. */
static int check_step(qkv_tape *t, const char *what, const qkv_tensor *xw, int kh,
                      const qkv_tensor *h, int hidden)
{
    int batch;
    return shapes_ok(t, what, "input projection", "B", xw, 2, kh, &h, 1, hidden, &batch);
}

/* Checks a cell's own input x [B, in] (in = W_x's rows) and its n states,
 * before x·W_x, so that an error names x rather than the projection. */
static int check_input(qkv_tape *t, const char *what, const qkv_tensor *x, const qkv_tensor *wx,
                       const qkv_tensor *const *states, int n, int hidden)
{
    int batch;
    return shapes_ok(t, what, "input", "B", x, 2, wx->shape[0], states, n, hidden, &batch);
}

/* Every step's x·W_x (+ b) of a sequence x [T,B,in] in one product, as
 * [T·B, cols] (step s at rows s·B), after checking x and the first states
 * (n of them); sets *steps and *batch. Records the error and returns nil
 * otherwise. */
static qkv_tensor *project_steps(qkv_tape *t, const char *what, qkv_tensor *x, int in,
                                 qkv_tensor *wx, qkv_tensor *b, const qkv_tensor *const *first,
                                 int n, int hidden, int *steps, int *batch)
{
    *steps = 0;
    if (!shapes_ok(t, what, "sequence", "T,B", x, 3, in, first, n, hidden, batch))
        return qkv_nil();
    if ((size_t)x->shape[0] * (size_t)*batch > INT_MAX) {
        qkv_tape_fail(t, QKV_ERR_SHAPE, "%s: T·B = %zu rows is too many", what,
                      (size_t)x->shape[0] * (size_t)*batch);
        return qkv_nil();
    }
    *steps = x->shape[0];
    return qkv_reshape(t, qkv_affine(t, x, wx, b), 2, (const int[]){*steps * *batch, wx->shape[1]});
}

/* Nonzero when each of the n first states is NULL or [batch, hidden];
 * otherwise records the error, naming the state. */
static int first_states_ok(qkv_tape *t, const char *what, const qkv_tensor *const *first, int n,
                           int batch, int hidden)
{
    for (int i = 0; i < n; i++) {
        const qkv_tensor *h = first[i];
        if (h != NULL && (qkv_tensor_is_nil(h) || h->ndim != 2 || h->shape[0] != batch ||
                          h->shape[1] != hidden)) {
            char sh[64];
            qkv_shape_str(h, sh, sizeof sh);
            qkv_tape_fail(t, QKV_ERR_SHAPE, "%s: the first %s %s must be [%d,%d] (batch, hidden)",
                          what, n == 2 && i == 1 ? "cell state" : "state", sh, batch, hidden);
            return 0;
        }
    }
    return 1;
}

/* The input projection of a sequence of tokens, ids [steps, batch] (step
 * s at ids + s·batch) picking rows of table [V, in]: table[ids]·W_x (+ b)
 * as [steps·batch, cols], after checking the table, the sizes and the n
 * first states. With fewer table rows than tokens, the table's rows are
 * projected once and then gathered, V rows of work instead of one per
 * token. Records the error and returns nil otherwise; *accepted is
 * nonzero once the inputs passed their checks (a failure after that, as
 * memory running out, leaves nil in every state, as the steps' would). */
static qkv_tensor *project_ids(qkv_tape *t, const char *what, qkv_tensor *table, const int *ids,
                               int steps, int batch, qkv_tensor *wx, qkv_tensor *b,
                               const qkv_tensor *const *first, int n, int hidden, int *accepted)
{
    *accepted = 0;
    if (qkv_tape_status(t) != QKV_OK)
        return qkv_nil();
    const int in = wx->shape[0];
    if (qkv_tensor_is_nil(table) || table->ndim != 2 || table->shape[1] != in) {
        char st[64];
        qkv_shape_str(table, st, sizeof st);
        qkv_tape_fail(t, QKV_ERR_SHAPE, "%s: the embedding table %s must be [V,%d]", what, st, in);
        return qkv_nil();
    }
    if (ids == NULL || steps < 1 || batch < 1 || (size_t)steps * (size_t)batch > INT_MAX) {
        qkv_tape_fail(t, QKV_ERR_ARG,
                      "%s: ids [%d,%d]%s: need ids, at least 1 step and 1 sentence, and at most "
                      "%d tokens",
                      what, steps, batch, ids == NULL ? " (NULL)" : "", INT_MAX);
        return qkv_nil();
    }
    const int tokens = steps * batch;
    for (int i = 0; i < tokens; i++) /* named here: the gather may see the projected table */
        if (ids[i] < 0 || ids[i] >= table->shape[0]) {
            char st[64];
            qkv_shape_str(table, st, sizeof st);
            qkv_tape_fail(t, QKV_ERR_ARG,
                          "%s: id %d at step %d, sentence %d is outside [0,%d) of the embedding "
                          "table %s",
                          what, ids[i], i / batch, i % batch, table->shape[0], st);
            return qkv_nil();
        }
    if (!first_states_ok(t, what, first, n, batch, hidden))
        return qkv_nil();
    *accepted = 1;
    if (table->shape[0] < tokens)
        return qkv_gather(t, qkv_affine(t, table, wx, b), ids, 1, &tokens);
    return qkv_affine(t, qkv_gather(t, table, ids, 1, &tokens), wx, b);
}

/* After a sequence form: its T states, or nil in each when the tape failed. */
static qkv_tensor *seq_done(qkv_tape *t, qkv_tensor **states, int steps, qkv_tensor *last)
{
    if (qkv_tape_status(t) == QKV_OK)
        return last;
    for (int i = 0; states != NULL && i < steps; i++)
        states[i] = qkv_nil();
    return qkv_nil();
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

/* Whether a cell has what its init adds; a zeroed one has none. */
static int cell_ready(int in, int hidden, const qkv_tensor *wx, const qkv_tensor *wh,
                      const qkv_tensor *b)
{
    return in > 0 && hidden > 0 && !qkv_tensor_is_nil(wx) && !qkv_tensor_is_nil(wh) &&
           !qkv_tensor_is_nil(b);
}

/* The first check of every step and sequence: a cell, and not a zeroed
 * one. */
static int rnn_unset(qkv_tape *t, const qkv_rnn *r)
{
    return qkv_layer_unset(t, "rnn", "cell", r != NULL,
                           r != NULL && cell_ready(r->in, r->hidden, r->wx, r->wh, r->b));
}

static int lstm_unset(qkv_tape *t, const qkv_lstm *l)
{
    return qkv_layer_unset(t, "lstm", "cell", l != NULL,
                           l != NULL && cell_ready(l->in, l->hidden, l->wx, l->wh, l->b));
}

static int gru_unset(qkv_tape *t, const qkv_gru *g)
{
    return qkv_layer_unset(t, "gru", "cell", g != NULL,
                           g != NULL && cell_ready(g->in, g->hidden, g->wx, g->wh, g->bx) &&
                               !qkv_tensor_is_nil(g->bh));
}

/* ---- Elman -------------------------------------------------------------- */

qkv_status qkv_rnn_init(qkv_rnn *r, qkv_params *p, const char *prefix, int in, int hidden,
                        qkv_rnn_act act, qkv_error *err)
{
    if (r != NULL) /* what a refusal leaves, not the old weights */
        memset(r, 0, sizeof *r);
    if (r == NULL || (act != QKV_RNN_TANH && act != QKV_RNN_LINEAR))
        return qkv_error_set(err, QKV_ERR_ARG, "rnn: no cell, or an unknown activation");
    qkv_status s = check_sizes("rnn", in, hidden, err);
    if (s != QKV_OK)
        return s;
    r->in = in;
    r->hidden = hidden;
    r->act = act;
    s = cell_params(p, prefix, in, hidden, 1, &r->wx, &r->wh, &r->b, "b", NULL, NULL, err);
    if (s == QKV_OK)
        qkv_layer_keep_name(r->name, prefix);
    return s;
}

static qkv_tensor *rnn_cell_projected_body(qkv_tape *t, const qkv_rnn *r, qkv_tensor *xw,
                                           qkv_tensor *h)
{
    if (rnn_unset(t, r))
        return qkv_nil();
    if (!check_step(t, "rnn", xw, r->hidden, h, r->hidden))
        return qkv_nil();
    qkv_tensor *z = pre(t, xw, h, r->wh, r->b);
    return r->act == QKV_RNN_TANH ? qkv_tanh(t, z) : z;
}

static qkv_tensor *rnn_cell_body(qkv_tape *t, const qkv_rnn *r, qkv_tensor *x, qkv_tensor *h)
{
    if (rnn_unset(t, r))
        return qkv_nil();
    const qkv_tensor *hs[1] = {h};
    if (!check_input(t, "rnn", x, r->wx, hs, 1, r->hidden))
        return qkv_nil();
    return qkv_rnn_cell_projected(t, r, qkv_matmul(t, x, r->wx), h);
}

/* The recurrence of a sequence whose input projection xw [T·B, H] is made. */
static qkv_tensor *rnn_run(qkv_tape *t, const qkv_rnn *r, qkv_tensor *xw, int T, int B,
                           qkv_tensor *h0, qkv_tensor **states)
{
    const int H = r->hidden;
    qkv_tensor *y = qkv_rnn_scan(t, qkv_reshape(t, xw, 3, (const int[]){T, B, H}), r->wh, h0,
                                 r->act == QKV_RNN_TANH);
    for (int s = 0; states != NULL && s < T; s++)
        states[s] = qkv_reshape(t, qkv_slice(t, y, 0, s, 1), 2, (const int[]){B, H});
    qkv_tensor *h = states != NULL
                        ? states[T - 1]
                        : qkv_reshape(t, qkv_slice(t, y, 0, T - 1, 1), 2, (const int[]){B, H});
    return seq_done(t, states, T, h);
}

static qkv_tensor *rnn_forward_body(qkv_tape *t, const qkv_rnn *r, qkv_tensor *x, qkv_tensor *h0,
                                    qkv_tensor **states)
{
    if (rnn_unset(t, r))
        return qkv_nil();
    int T = 0, B = 0;
    /* every step's x·W_x + b in one product, then the recurrence as one node */
    qkv_tensor *xw = project_steps(t, "rnn", x, r->in, r->wx, r->b, (const qkv_tensor *const[]){h0},
                                   1, r->hidden, &T, &B);
    if (T == 0)
        return qkv_nil();
    return rnn_run(t, r, xw, T, B, h0, states);
}

static qkv_tensor *rnn_forward_ids_body(qkv_tape *t, const qkv_rnn *r, qkv_tensor *table,
                                        const int *ids, int steps, int batch, qkv_tensor *h0,
                                        qkv_tensor **states)
{
    if (rnn_unset(t, r))
        return qkv_nil();
    int accepted;
    qkv_tensor *xw = project_ids(t, "rnn", table, ids, steps, batch, r->wx, r->b,
                                 (const qkv_tensor *const[]){h0}, 1, r->hidden, &accepted);
    if (!accepted)
        return qkv_nil();
    return rnn_run(t, r, xw, steps, batch, h0, states);
}

/* ---- LSTM --------------------------------------------------------------- */

qkv_status qkv_lstm_init(qkv_lstm *l, qkv_params *p, const char *prefix, int in, int hidden,
                         qkv_error *err)
{
    if (l == NULL)
        return qkv_error_set(err, QKV_ERR_ARG, "lstm: no cell");
    memset(l, 0, sizeof *l); /* what a refusal leaves, not the old weights */
    qkv_status s = check_sizes("lstm", in, hidden, err);
    if (s != QKV_OK)
        return s;
    l->in = in;
    l->hidden = hidden;
    s = cell_params(p, prefix, in, hidden, 4, &l->wx, &l->wh, &l->b, "b", NULL, NULL, err);
    if (s == QKV_OK)
        qkv_layer_keep_name(l->name, prefix);
    return s;
}

static qkv_lstm_state lstm_cell_projected_body(qkv_tape *t, const qkv_lstm *l, qkv_tensor *xw,
                                               const qkv_lstm_state *s)
{
    qkv_lstm_state out = {qkv_nil(), qkv_nil()};
    if (lstm_unset(t, l))
        return out;
    const int H = l->hidden;
    if (!check_step(t, "lstm", xw, 4 * H, s != NULL ? s->h : NULL, H) ||
        (s != NULL && !check_step(t, "lstm (cell state)", xw, 4 * H, s->c, H)))
        return out;
    qkv_tensor *z = pre(t, xw, s != NULL ? s->h : NULL, l->wh, l->b);
    qkv_tensor *i = qkv_sigmoid(t, part(t, z, 0, H)), *g = qkv_tanh(t, part(t, z, 2, H));
    qkv_tensor *o = qkv_sigmoid(t, part(t, z, 3, H));
    qkv_tensor *c = qkv_mul(t, i, g);
    if (s != NULL && s->c != NULL) /* a NULL c, as a NULL s, is a zero state */
        c = qkv_add(t, qkv_mul(t, qkv_sigmoid(t, part(t, z, 1, H)), s->c), c);
    out.h = qkv_mul(t, o, qkv_tanh(t, c));
    out.c = c;
    if (qkv_tape_status(t) != QKV_OK)
        out.h = out.c = qkv_nil();
    return out;
}

static qkv_lstm_state lstm_cell_body(qkv_tape *t, const qkv_lstm *l, qkv_tensor *x,
                                     const qkv_lstm_state *s)
{
    if (lstm_unset(t, l))
        return (qkv_lstm_state){qkv_nil(), qkv_nil()};
    const qkv_tensor *hc[2] = {s != NULL ? s->h : NULL, s != NULL ? s->c : NULL};
    if (!check_input(t, "lstm", x, l->wx, hc, 2, l->hidden))
        return (qkv_lstm_state){qkv_nil(), qkv_nil()};
    return qkv_lstm_cell_projected(t, l, qkv_matmul(t, x, l->wx), s);
}

/* The steps of a sequence whose input projection xw [T·B, 4H] is made. */
static qkv_lstm_state lstm_run(qkv_tape *t, const qkv_lstm *l, qkv_tensor *xw, int T, int B,
                               const qkv_lstm_state *s0, qkv_lstm_state *states)
{
    qkv_lstm_state s = {qkv_nil(), qkv_nil()};
    for (int i = 0; i < T && qkv_tape_status(t) == QKV_OK; i++) {
        s = qkv_lstm_cell_projected(t, l, qkv_slice(t, xw, 0, i * B, B), i > 0 ? &s : s0);
        if (states != NULL)
            states[i] = s;
    }
    if (qkv_tape_status(t) != QKV_OK) {
        s.h = s.c = qkv_nil();
        for (int i = 0; states != NULL && i < T; i++)
            states[i] = s;
    }
    return s;
}

static qkv_lstm_state lstm_forward_body(qkv_tape *t, const qkv_lstm *l, qkv_tensor *x,
                                        const qkv_lstm_state *s0, qkv_lstm_state *states)
{
    if (lstm_unset(t, l))
        return (qkv_lstm_state){qkv_nil(), qkv_nil()};
    int T = 0, B = 0;
    const qkv_tensor *first[2] = {s0 != NULL ? s0->h : NULL, s0 != NULL ? s0->c : NULL};
    qkv_tensor *xw = project_steps(t, "lstm", x, l->in, l->wx, NULL, first, 2, l->hidden, &T, &B);
    return lstm_run(t, l, xw, T, B, s0, states);
}

static qkv_lstm_state lstm_forward_ids_body(qkv_tape *t, const qkv_lstm *l, qkv_tensor *table,
                                            const int *ids, int steps, int batch,
                                            const qkv_lstm_state *s0, qkv_lstm_state *states)
{
    if (lstm_unset(t, l))
        return (qkv_lstm_state){qkv_nil(), qkv_nil()};
    const qkv_tensor *first[2] = {s0 != NULL ? s0->h : NULL, s0 != NULL ? s0->c : NULL};
    int accepted;
    qkv_tensor *xw = project_ids(t, "lstm", table, ids, steps, batch, l->wx, NULL, first, 2,
                                 l->hidden, &accepted);
    if (!accepted)
        return (qkv_lstm_state){qkv_nil(), qkv_nil()};
    return lstm_run(t, l, xw, steps, batch, s0, states);
}

/* ---- GRU ---------------------------------------------------------------- */

qkv_status qkv_gru_init(qkv_gru *g, qkv_params *p, const char *prefix, int in, int hidden,
                        qkv_error *err)
{
    if (g == NULL)
        return qkv_error_set(err, QKV_ERR_ARG, "gru: no cell");
    memset(g, 0, sizeof *g); /* what a refusal leaves, not the old weights */
    qkv_status s = check_sizes("gru", in, hidden, err);
    if (s != QKV_OK)
        return s;
    g->in = in;
    g->hidden = hidden;
    s = cell_params(p, prefix, in, hidden, 3, &g->wx, &g->wh, &g->bx, "bx", &g->bh, "bh", err);
    if (s == QKV_OK)
        qkv_layer_keep_name(g->name, prefix);
    return s;
}

static qkv_tensor *gru_cell_projected_body(qkv_tape *t, const qkv_gru *g, qkv_tensor *xw,
                                           qkv_tensor *h)
{
    if (gru_unset(t, g))
        return qkv_nil();
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

static qkv_tensor *gru_cell_body(qkv_tape *t, const qkv_gru *g, qkv_tensor *x, qkv_tensor *h)
{
    if (gru_unset(t, g))
        return qkv_nil();
    const qkv_tensor *hs[1] = {h};
    if (!check_input(t, "gru", x, g->wx, hs, 1, g->hidden))
        return qkv_nil();
    return qkv_gru_cell_projected(t, g, qkv_matmul(t, x, g->wx), h);
}

/* The steps of a sequence whose input projection xw [T·B, 3H] is made. */
static qkv_tensor *gru_run(qkv_tape *t, const qkv_gru *g, qkv_tensor *xw, int T, int B,
                           qkv_tensor *h0, qkv_tensor **states)
{
    qkv_tensor *h = qkv_nil();
    for (int i = 0; i < T && qkv_tape_status(t) == QKV_OK; i++) {
        h = qkv_gru_cell_projected(t, g, qkv_slice(t, xw, 0, i * B, B), i > 0 ? h : h0);
        if (states != NULL)
            states[i] = h;
    }
    return seq_done(t, states, T, h);
}

static qkv_tensor *gru_forward_body(qkv_tape *t, const qkv_gru *g, qkv_tensor *x, qkv_tensor *h0,
                                    qkv_tensor **states)
{
    if (gru_unset(t, g))
        return qkv_nil();
    int T = 0, B = 0;
    qkv_tensor *xw = project_steps(t, "gru", x, g->in, g->wx, NULL, (const qkv_tensor *const[]){h0},
                                   1, g->hidden, &T, &B);
    return gru_run(t, g, xw, T, B, h0, states);
}

static qkv_tensor *gru_forward_ids_body(qkv_tape *t, const qkv_gru *g, qkv_tensor *table,
                                        const int *ids, int steps, int batch, qkv_tensor *h0,
                                        qkv_tensor **states)
{
    if (gru_unset(t, g))
        return qkv_nil();
    int accepted;
    qkv_tensor *xw = project_ids(t, "gru", table, ids, steps, batch, g->wx, NULL,
                                 (const qkv_tensor *const[]){h0}, 1, g->hidden, &accepted);
    if (!accepted)
        return qkv_nil();
    return gru_run(t, g, xw, steps, batch, h0, states);
}

/* ---- the entry points: each names its layer in an error met inside it ---- */

qkv_tensor *qkv_rnn_cell_projected(qkv_tape *t, const qkv_rnn *r, qkv_tensor *xw, qkv_tensor *h)
{
    const int clean = qkv_layer_clean(t);
    qkv_tensor *y = rnn_cell_projected_body(t, r, xw, h);
    return qkv_layer_named(t, clean, "rnn", r != NULL ? r->name : NULL, y);
}

qkv_tensor *qkv_rnn_cell(qkv_tape *t, const qkv_rnn *r, qkv_tensor *x, qkv_tensor *h)
{
    const int clean = qkv_layer_clean(t);
    qkv_tensor *y = rnn_cell_body(t, r, x, h);
    return qkv_layer_named(t, clean, "rnn", r != NULL ? r->name : NULL, y);
}

qkv_tensor *qkv_rnn_forward(qkv_tape *t, const qkv_rnn *r, qkv_tensor *x, qkv_tensor *h0,
                            qkv_tensor **states)
{
    const int clean = qkv_layer_clean(t);
    qkv_tensor *y = rnn_forward_body(t, r, x, h0, states);
    return qkv_layer_named(t, clean, "rnn", r != NULL ? r->name : NULL, y);
}

qkv_tensor *qkv_rnn_forward_ids(qkv_tape *t, const qkv_rnn *r, qkv_tensor *table, const int *ids,
                                int steps, int batch, qkv_tensor *h0, qkv_tensor **states)
{
    const int clean = qkv_layer_clean(t);
    qkv_tensor *y = rnn_forward_ids_body(t, r, table, ids, steps, batch, h0, states);
    return qkv_layer_named(t, clean, "rnn", r != NULL ? r->name : NULL, y);
}

qkv_lstm_state qkv_lstm_cell_projected(qkv_tape *t, const qkv_lstm *l, qkv_tensor *xw,
                                       const qkv_lstm_state *s)
{
    const int clean = qkv_layer_clean(t);
    qkv_lstm_state st = lstm_cell_projected_body(t, l, xw, s);
    (void)qkv_layer_named(t, clean, "lstm", l != NULL ? l->name : NULL, st.h);
    return st;
}

qkv_lstm_state qkv_lstm_cell(qkv_tape *t, const qkv_lstm *l, qkv_tensor *x, const qkv_lstm_state *s)
{
    const int clean = qkv_layer_clean(t);
    qkv_lstm_state st = lstm_cell_body(t, l, x, s);
    (void)qkv_layer_named(t, clean, "lstm", l != NULL ? l->name : NULL, st.h);
    return st;
}

qkv_lstm_state qkv_lstm_forward(qkv_tape *t, const qkv_lstm *l, qkv_tensor *x,
                                const qkv_lstm_state *s0, qkv_lstm_state *states)
{
    const int clean = qkv_layer_clean(t);
    qkv_lstm_state st = lstm_forward_body(t, l, x, s0, states);
    (void)qkv_layer_named(t, clean, "lstm", l != NULL ? l->name : NULL, st.h);
    return st;
}

qkv_lstm_state qkv_lstm_forward_ids(qkv_tape *t, const qkv_lstm *l, qkv_tensor *table,
                                    const int *ids, int steps, int batch, const qkv_lstm_state *s0,
                                    qkv_lstm_state *states)
{
    const int clean = qkv_layer_clean(t);
    qkv_lstm_state st = lstm_forward_ids_body(t, l, table, ids, steps, batch, s0, states);
    (void)qkv_layer_named(t, clean, "lstm", l != NULL ? l->name : NULL, st.h);
    return st;
}

qkv_tensor *qkv_gru_cell_projected(qkv_tape *t, const qkv_gru *g, qkv_tensor *xw, qkv_tensor *h)
{
    const int clean = qkv_layer_clean(t);
    qkv_tensor *y = gru_cell_projected_body(t, g, xw, h);
    return qkv_layer_named(t, clean, "gru", g != NULL ? g->name : NULL, y);
}

qkv_tensor *qkv_gru_cell(qkv_tape *t, const qkv_gru *g, qkv_tensor *x, qkv_tensor *h)
{
    const int clean = qkv_layer_clean(t);
    qkv_tensor *y = gru_cell_body(t, g, x, h);
    return qkv_layer_named(t, clean, "gru", g != NULL ? g->name : NULL, y);
}

qkv_tensor *qkv_gru_forward(qkv_tape *t, const qkv_gru *g, qkv_tensor *x, qkv_tensor *h0,
                            qkv_tensor **states)
{
    const int clean = qkv_layer_clean(t);
    qkv_tensor *y = gru_forward_body(t, g, x, h0, states);
    return qkv_layer_named(t, clean, "gru", g != NULL ? g->name : NULL, y);
}

qkv_tensor *qkv_gru_forward_ids(qkv_tape *t, const qkv_gru *g, qkv_tensor *table, const int *ids,
                                int steps, int batch, qkv_tensor *h0, qkv_tensor **states)
{
    const int clean = qkv_layer_clean(t);
    qkv_tensor *y = gru_forward_ids_body(t, g, table, ids, steps, batch, h0, states);
    return qkv_layer_named(t, clean, "gru", g != NULL ? g->name : NULL, y);
}
