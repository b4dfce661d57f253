/*
 * checks.c - the library's built-in gradient checks: one or more per op,
 * and per layer, on random inputs, run by qkv_gradcheck (gradcheck.h) and
 * listed by `qkv gradcheck`. They sit in the top layer of the library so
 * that they can reach every op and every layer.
 */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "kernels/kernels.h" /* qkv_attention_online_blocks */
#include "qkv/gradcheck.h"
#include "qkv/layers.h"
#include "qkv/rng.h"

#define MAXP 16

typedef qkv_tensor *(*case_fn)(qkv_tape *t, qkv_tensor **p);

typedef struct gc_case {
    const char *name;
    case_fn fn; /* returns any tensor; a random readout makes it scalar */
    int np;
    int ndim[MAXP];
    int shape[MAXP][QKV_MAX_DIMS];
    int domain;       /* ANY; AWAY: off 0 (relu's kink); POSITIVE: > 0.5 (log, sqrt);
                         OFF_ONE: off ±1 (clamp's bounds); QUARTERS: odd multiples of
                         1/4, 1/4 or more off the L1 and Huber losses' kinks at a
                         target on multiples of 1/2 (fixed_target's HALVES) */
    double float_tol; /* float32 builds only: a looser tolerance, or 0 for the default */
} gc_case;

/* The layers (and the unrolled recurrent cells) compose a dozen ops, layer
 * norm's curvature among them: in float32 the finite differences'
 * truncation error (h² times the third derivative, at h = 1e-2) reaches
 * 3e-2 on the whole block and 2e-2 on the GRU (measured), so float32
 * judges them at 5e-2, still below the 0.1 or more that a wrong sign or
 * factor gives; the double build holds them to 1e-6 like every op. */
#define LAYER_TOL 5e-2

enum { ANY, AWAY, POSITIVE, OFF_ONE, QUARTERS };

/* The cases that call one op on their inputs as they are. */
#define UNARY(op)                                          \
    static qkv_tensor *c_##op(qkv_tape *t, qkv_tensor **p) \
    {                                                      \
        return qkv_##op(t, p[0]);                          \
    }
#define BINARY(op)                                         \
    static qkv_tensor *c_##op(qkv_tape *t, qkv_tensor **p) \
    {                                                      \
        return qkv_##op(t, p[0], p[1]);                    \
    }
UNARY(transpose)
UNARY(sum)
UNARY(mean)
UNARY(sum_last)
UNARY(mean_last)
UNARY(softmax)
UNARY(log_softmax)
UNARY(tanh)
UNARY(exp)
UNARY(neg)
UNARY(log)
UNARY(sqrt)
UNARY(sigmoid)
UNARY(gelu)
UNARY(silu)
UNARY(relu)
UNARY(abs)
UNARY(softplus)
BINARY(matmul)
BINARY(matmul_nt)
BINARY(add)
BINARY(mul)
BINARY(sub)
BINARY(div)

static qkv_tensor *c_affine(qkv_tape *t, qkv_tensor **p)
{
    return qkv_affine(t, p[0], p[1], p[2]);
}
static qkv_tensor *c_affine_nobias(qkv_tape *t, qkv_tensor **p)
{
    return qkv_affine(t, p[0], p[1], NULL);
}
static qkv_tensor *c_rnn_scan(qkv_tape *t, qkv_tensor **p)
{
    return qkv_rnn_scan(t, p[0], p[1], p[2], 1);
}
static qkv_tensor *c_rnn_scan_linear(qkv_tape *t, qkv_tensor **p)
{
    return qkv_rnn_scan(t, p[0], p[1], NULL, 0);
}
static qkv_tensor *c_scale(qkv_tape *t, qkv_tensor **p)
{
    return qkv_scale(t, p[0], 0.37);
}
/* Both bounds, and one: the gradient passes inside, and stops outside. */
static qkv_tensor *c_clamp(qkv_tape *t, qkv_tensor **p)
{
    return qkv_add(t, qkv_clamp(t, p[0], -1, 1), qkv_clamp(t, p[0], -INFINITY, 1));
}
/* A negative slope too: the gradient changes sign across the kink. */
static qkv_tensor *c_leaky_relu(qkv_tape *t, qkv_tensor **p)
{
    return qkv_add(t, qkv_leaky_relu(t, p[0], 0.2), qkv_leaky_relu(t, p[0], -0.7));
}
static qkv_tensor *c_pow(qkv_tape *t, qkv_tensor **p)
{
    return qkv_mul(t, qkv_pow(t, p[0], 3), qkv_pow(t, p[0], -0.5));
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

static qkv_tensor *c_stack(qkv_tape *t, qkv_tensor **p)
{
    return qkv_stack(t, 3, p, -2);
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

static qkv_tensor *c_min_dim(qkv_tape *t, qkv_tensor **p)
{
    return qkv_min_dim(t, p[0], 1, 1);
}

static qkv_tensor *c_logsumexp_dim(qkv_tape *t, qkv_tensor **p)
{
    return qkv_logsumexp_dim(t, p[0], 1, 1);
}

static qkv_tensor *c_var_dim(qkv_tape *t, qkv_tensor **p)
{
    return qkv_var_dim(t, p[0], 1, 1, 1);
}

static qkv_tensor *c_var_dim_population(qkv_tape *t, qkv_tensor **p)
{
    return qkv_var_dim(t, p[0], -1, 0, 0);
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

/* What fixed_target draws: N(0,1), uniform in [0, 1], or N(0,1) rounded
 * to a multiple of 1/2. */
enum { NORMAL, UNIT, HALVES };

/* A fixed target of x's shape, the same at every call: from a seeded RNG,
 * of the kind above. */
static qkv_tensor *fixed_target(qkv_tape *t, const qkv_tensor *x, int kind)
{
    qkv_tensor *y = qkv_tape_tensor(t, x->ndim, x->shape, 0);
    qkv_rng g;
    qkv_rng_seed(&g, 77);
    for (size_t i = 0; !qkv_tensor_is_nil(y) && i < y->numel; i++) {
        const double v = kind == UNIT ? qkv_rng_random(&g) : qkv_rng_normalvariate(&g, 0, 1);
        y->data[i] = (qkv_real)(kind == HALVES ? round(2 * v) / 2 : v);
    }
    return y;
}

static qkv_tensor *c_mse(qkv_tape *t, qkv_tensor **p)
{
    return qkv_mse(t, p[0], fixed_target(t, p[0], NORMAL));
}

static qkv_tensor *c_bce(qkv_tape *t, qkv_tensor **p)
{
    return qkv_bce_with_logits(t, p[0], fixed_target(t, p[0], UNIT));
}

/* Predictions on odd multiples of 1/4 and targets on multiples of 1/2:
 * |d| and |d| - delta (delta 1, and 1.5) are 1/4 or more from 0. */
static qkv_tensor *c_l1(qkv_tape *t, qkv_tensor **p)
{
    return qkv_l1_loss(t, p[0], fixed_target(t, p[0], HALVES));
}

static qkv_tensor *c_huber(qkv_tape *t, qkv_tensor **p)
{
    const qkv_tensor *y = fixed_target(t, p[0], HALVES);
    return qkv_add(t, qkv_huber_loss(t, p[0], y, 1), qkv_huber_loss(t, p[0], y, 1.5));
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

static qkv_tensor *c_cross_entropy_smooth(qkv_tape *t, qkv_tensor **p)
{
    static const int targets[5] = {1, 3, QKV_IGNORE, 0, 2};
    return qkv_cross_entropy_smooth(t, p[0], targets, 0.1);
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

/* The fused op on [B,H,T,d] (heads), with a causal mask [T,T]. */
static qkv_tensor *c_attention_fused4(qkv_tape *t, qkv_tensor **p)
{
    qkv_tensor *m = qkv_tape_tensor(t, 2, (const int[]){3, 4}, 0);
    for (int i = 0; !qkv_tensor_is_nil(m) && i < 12; i++)
        m->data[i] = i % 4 > i / 4 + 1 ? -INFINITY : 0;
    return qkv_attention(t, p[0], p[1], p[2], m, 0.5, NULL);
}

/* The online form in blocks of 2 rows and 3 keys (so 5×7 crosses both),
 * with the causal mask and its fully masked row, or the causal flag; the
 * block sizes are put back as they were. */
static qkv_tensor *online_check(qkv_tape *t, qkv_tensor **p, const qkv_tensor *mask, int causal)
{
    int bq, bk;
    qkv_attention_online_block_sizes(INT_MAX, INT_MAX, &bq, &bk);
    qkv_attention_online_blocks(2, 3);
    qkv_tensor *o = qkv_attention_online(t, p[0], p[1], p[2], mask, 0.6, causal);
    qkv_attention_online_blocks(bq, bk);
    return qkv_mean(t, qkv_tanh(t, o));
}

static qkv_tensor *c_attention_online(qkv_tape *t, qkv_tensor **p)
{
    return online_check(t, p, causal_mask(t, 5, 7), 0);
}

static qkv_tensor *c_attention_online_causal(qkv_tape *t, qkv_tensor **p)
{
    return online_check(t, p, NULL, 1);
}

/* The heads form on a fused projection [B,T,3D] (2 heads of 2 columns),
 * causal, with a loss that reads the weights too. */
static qkv_tensor *c_attention_heads(qkv_tape *t, qkv_tensor **p)
{
    qkv_attention_parts parts;
    qkv_tensor *o = qkv_attention_heads(t, p[0], 2, causal_mask(t, 3, 3), 0.7, &parts);
    return qkv_add(t, qkv_mean(t, qkv_tanh(t, o)), qkv_sum(t, qkv_mul(t, parts.attn, parts.attn)));
}

/* The heads form online, in blocks of 2 rows and 3 keys, causal by the
 * flag, with a padding mask [B,1,1,T] that drops item 1's last key. */
static qkv_tensor *c_attention_heads_online(qkv_tape *t, qkv_tensor **p)
{
    qkv_tensor *m = qkv_tape_tensor(t, 4, (const int[]){2, 1, 1, 5}, 0);
    for (int j = 0; !qkv_tensor_is_nil(m) && j < 10; j++)
        m->data[j] = j == 9 ? -INFINITY : 0;
    int bq, bk;
    qkv_attention_online_block_sizes(INT_MAX, INT_MAX, &bq, &bk);
    qkv_attention_online_blocks(2, 3);
    qkv_tensor *o = qkv_attention_heads_online(t, p[0], 2, m, 0.7, 1);
    qkv_attention_online_blocks(bq, bk);
    return qkv_mean(t, qkv_tanh(t, o));
}

/* A whole attention classifier end to end (the shape of the tutorial's
 * coreference model): Q, K, V looked up from token ids, scaled scores,
 * padding mask, softmax, A·V (all in qkv_embed_attention), one query row
 * per item, ·Wo, cross-entropy. */
static qkv_tensor *model_of(qkv_tape *t, qkv_tensor **p, int rows)
{
    static const int ids[8] = {0, 3, 5, 2, 1, 4, 2, 0}; /* [2,4]; item 1 is padded */
    static const int pron[2] = {1, 2}, target[2] = {2, 0};
    qkv_tensor *m = qkv_tape_tensor(t, 3, (const int[]){2, 1, 4}, 0);
    if (qkv_tensor_is_nil(m))
        return m;
    for (int j = 0; j < 8; j++)
        m->data[j] = j == 7 ? -INFINITY : 0; /* item 1 has length 3 */
    const double scale = 1.0 / sqrt(3.0);
    qkv_tensor *h =
        rows ? qkv_embed_attention_rows(t, p[0], p[1], p[2], ids, 2, 4, m, scale, pron, NULL)
             : qkv_pick_rows(t, qkv_embed_attention(t, p[0], p[1], p[2], ids, 2, 4, m, scale, NULL),
                             pron);
    return qkv_cross_entropy(t, qkv_matmul(t, h, p[3]), target);
}

static qkv_tensor *c_model(qkv_tape *t, qkv_tensor **p)
{
    return model_of(t, p, 0);
}

/* The same with the rows form, qkv_embed_attention_rows, as the model
 * runs it. */
static qkv_tensor *c_model_rows(qkv_tape *t, qkv_tensor **p)
{
    return model_of(t, p, 1);
}

/* ---- layers: p[0] is the input x [B,T,D], then the layer's parameters -- */

enum { LB = 2, LT = 3, LD = 4, LH = 2, LF = 6 };

static qkv_linear linear_of(qkv_tensor *w, qkv_tensor *b)
{
    qkv_linear l = {w, b, w->shape[0], w->shape[1], ""};
    return l;
}

static qkv_mha mha_of(qkv_tensor **p, int causal)
{
    qkv_mha m = {linear_of(p[0], p[1]), linear_of(p[2], p[3]), LD, LH, causal, ""};
    return m;
}

static qkv_ffn ffn_of(qkv_tensor **p)
{
    qkv_ffn f = {linear_of(p[0], p[1]), linear_of(p[2], p[3]), ""};
    return f;
}

/* Item 1 has one padded key (its last). */
static qkv_tensor *pad_mask(qkv_tape *t)
{
    qkv_tensor *pad = qkv_tape_tensor(t, 2, (const int[]){LB, LT}, 0);
    for (int i = 0; !qkv_tensor_is_nil(pad) && i < LB * LT; i++)
        pad->data[i] = i == LB * LT - 1 ? -INFINITY : 0;
    return pad;
}

static qkv_tensor *c_linear(qkv_tape *t, qkv_tensor **p)
{
    qkv_linear l = linear_of(p[1], p[2]);
    return qkv_linear_forward(t, &l, p[0]);
}

/* Causal multi-head attention with a padded key, and a readout of the
 * heads' attention weights too. */
static qkv_tensor *c_mha(qkv_tape *t, qkv_tensor **p)
{
    qkv_mha m = mha_of(p + 1, 1);
    qkv_mha_parts parts;
    qkv_tensor *y = qkv_mha_forward(t, &m, p[0], pad_mask(t), &parts);
    return qkv_add(t, qkv_sum(t, qkv_mul(t, parts.attn, parts.attn)), qkv_sum(t, y));
}

static qkv_tensor *c_ffn(qkv_tape *t, qkv_tensor **p)
{
    qkv_ffn f = ffn_of(p + 1);
    return qkv_ffn_forward(t, &f, p[0]);
}

/* The whole pre-norm block: x, ln1 (γ, β), attn (4), ln2 (γ, β), ffn (4). */
static qkv_tensor *c_block(qkv_tape *t, qkv_tensor **p)
{
    qkv_block b;
    b.ln1 = (qkv_norm){p[1], p[2], 1e-5, ""};
    b.attn = mha_of(p + 3, 1);
    b.ln2 = (qkv_norm){p[7], p[8], 1e-5, ""};
    b.ffn = ffn_of(p + 9);
    return qkv_block_forward(t, &b, p[0], pad_mask(t), NULL);
}

/* ---- recurrent cells: p[0] is x [RT,RB,RI], unrolled over RT steps ------ */

enum { RT = 6, RB = 2, RI = 3, RH = 4 };

/* x's step i as [RB,RI]. */
static qkv_tensor *step_in(qkv_tape *t, qkv_tensor *x, int i)
{
    return qkv_reshape(t, qkv_slice(t, x, 0, i, 1), 2, (const int[]){RB, RI});
}

/* Every step's state, stacked [RT,RB,RH], so each one reaches the loss. */
static qkv_tensor *stacked(qkv_tape *t, qkv_tensor **h)
{
    for (int i = 0; i < RT; i++)
        h[i] = qkv_reshape(t, h[i], 3, (const int[]){1, RB, RH});
    return qkv_concat(t, RT, h, 0);
}

static qkv_tensor *rnn_unrolled(qkv_tape *t, qkv_tensor **p, qkv_rnn_act act)
{
    const qkv_rnn r = {p[1], p[2], p[3], RI, RH, act, ""};
    qkv_tensor *h[RT];
    for (int i = 0; i < RT; i++)
        h[i] = qkv_rnn_cell(t, &r, step_in(t, p[0], i), i ? h[i - 1] : NULL);
    return stacked(t, h);
}

/* The sequence form, from a given first state p[4], every state stacked. */
static qkv_tensor *c_rnn_sequence(qkv_tape *t, qkv_tensor **p)
{
    const qkv_rnn r = {p[1], p[2], p[3], RI, RH, QKV_RNN_TANH, ""};
    qkv_tensor *h[RT];
    qkv_rnn_forward(t, &r, p[0], p[4], h);
    return qkv_tape_status(t) == QKV_OK ? stacked(t, h) : qkv_nil();
}

static qkv_tensor *c_rnn_tanh(qkv_tape *t, qkv_tensor **p)
{
    return rnn_unrolled(t, p, QKV_RNN_TANH);
}

static qkv_tensor *c_rnn_linear(qkv_tape *t, qkv_tensor **p)
{
    return rnn_unrolled(t, p, QKV_RNN_LINEAR);
}

/* The LSTM's h at every step plus its last c. */
static qkv_tensor *c_lstm(qkv_tape *t, qkv_tensor **p)
{
    const qkv_lstm l = {p[1], p[2], p[3], RI, RH, ""};
    qkv_tensor *h[RT];
    qkv_lstm_state s = {NULL, NULL};
    for (int i = 0; i < RT; i++) {
        s = qkv_lstm_cell(t, &l, step_in(t, p[0], i), i ? &s : NULL);
        h[i] = s.h;
    }
    return qkv_add(t, qkv_sum(t, stacked(t, h)), qkv_sum(t, qkv_mul(t, s.c, s.c)));
}

static qkv_tensor *c_gru(qkv_tape *t, qkv_tensor **p)
{
    const qkv_gru g = {p[1], p[2], p[3], p[4], RI, RH, ""};
    qkv_tensor *h[RT];
    for (int i = 0; i < RT; i++)
        h[i] = qkv_gru_cell(t, &g, step_in(t, p[0], i), i ? h[i - 1] : NULL);
    return stacked(t, h);
}

/* Every h of a sequence's RT states and the last c, each [1,RB,RH],
 * concatenated for the readout; nil after a failure. */
static qkv_tensor *lstm_states(qkv_tape *t, const qkv_lstm_state *s)
{
    if (qkv_tape_status(t) != QKV_OK)
        return qkv_nil();
    qkv_tensor *hc[RT + 1];
    for (int i = 0; i <= RT; i++)
        hc[i] = qkv_reshape(t, i < RT ? s[i].h : s[RT - 1].c, 3, (const int[]){1, RB, RH});
    return qkv_concat(t, RT + 1, hc, 0);
}

/* The sequence forms, from given first states (p[4], p[5]). */
static qkv_tensor *c_lstm_forward(qkv_tape *t, qkv_tensor **p)
{
    const qkv_lstm l = {p[1], p[2], p[3], RI, RH, ""};
    const qkv_lstm_state s0 = {p[4], p[5]};
    qkv_lstm_state s[RT];
    qkv_lstm_forward(t, &l, p[0], &s0, s);
    return lstm_states(t, s);
}

static qkv_tensor *c_gru_forward(qkv_tape *t, qkv_tensor **p)
{
    const qkv_gru g = {p[1], p[2], p[3], p[4], RI, RH, ""};
    qkv_tensor *h[RT];
    qkv_gru_forward(t, &g, p[0], p[5], h);
    return qkv_tape_status(t) == QKV_OK ? stacked(t, h) : qkv_nil();
}

/* Tokens in (the _ids forms): p[0] is a table of RV rows, fewer than the
 * RT·RB tokens, so the table is projected and its rows gathered; every
 * row is read, some by several tokens (their gradients add up). */
enum { RV = 5 };
static const int rnn_ids[RT * RB] = {0, 1, 2, 3, 4, 0, 1, 1, 4, 2, 3, 0};

static qkv_tensor *c_rnn_ids(qkv_tape *t, qkv_tensor **p)
{
    const qkv_rnn r = {p[1], p[2], p[3], RI, RH, QKV_RNN_TANH, ""};
    qkv_tensor *h[RT];
    qkv_rnn_forward_ids(t, &r, p[0], rnn_ids, RT, RB, p[4], h);
    return qkv_tape_status(t) == QKV_OK ? stacked(t, h) : qkv_nil();
}

static qkv_tensor *c_lstm_ids(qkv_tape *t, qkv_tensor **p)
{
    const qkv_lstm l = {p[1], p[2], p[3], RI, RH, ""};
    const qkv_lstm_state s0 = {p[4], p[5]};
    qkv_lstm_state s[RT];
    qkv_lstm_forward_ids(t, &l, p[0], rnn_ids, RT, RB, &s0, s);
    return lstm_states(t, s);
}

static qkv_tensor *c_gru_ids(qkv_tape *t, qkv_tensor **p)
{
    const qkv_gru g = {p[1], p[2], p[3], p[4], RI, RH, ""};
    qkv_tensor *h[RT];
    qkv_gru_forward_ids(t, &g, p[0], rnn_ids, RT, RB, p[5], h);
    return qkv_tape_status(t) == QKV_OK ? stacked(t, h) : qkv_nil();
}

static const gc_case cases[] = {
    {"matmul", c_matmul, 2, {2, 2}, {{3, 4}, {4, 5}}, 0, 0},
    {"matmul batched", c_matmul, 2, {3, 3}, {{2, 3, 4}, {2, 4, 5}}, 0, 0},
    {"matmul shared B", c_matmul, 2, {3, 2}, {{2, 3, 4}, {4, 5}}, 0, 0},
    {"matmul_nt (Q·Kᵀ)", c_matmul_nt, 2, {3, 3}, {{2, 3, 4}, {2, 5, 4}}, 0, 0},
    {"affine (x·W + b)", c_affine, 3, {3, 2, 1}, {{2, 3, 4}, {4, 5}, {5}}, 0, 0},
    {"affine, no bias", c_affine_nobias, 2, {2, 2}, {{3, 4}, {4, 5}}, 0, 0},
    {"rnn_scan, tanh, h0", c_rnn_scan, 3, {3, 2, 2}, {{5, 2, 3}, {3, 3}, {2, 3}}, 0, 0},
    {"rnn_scan, identity", c_rnn_scan_linear, 2, {3, 2}, {{5, 2, 3}, {3, 3}}, 0, 0},
    {"transpose", c_transpose, 1, {3}, {{2, 3, 4}}, 0, 0},
    {"scale", c_scale, 1, {2}, {{3, 4}}, 0, 0},
    {"add", c_add, 2, {2, 2}, {{3, 4}, {3, 4}}, 0, 0},
    {"add bias row", c_add, 2, {3, 1}, {{2, 3, 4}, {4}}, 0, 0},
    {"mul", c_mul, 2, {2, 2}, {{3, 4}, {3, 4}}, 0, 0},
    {"mul broadcast", c_mul, 2, {3, 2}, {{2, 3, 4}, {3, 1}}, 0, 0},
    {"sum", c_sum, 1, {2}, {{3, 4}}, 0, 0},
    {"mean", c_mean, 1, {2}, {{3, 4}}, 0, 0},
    {"sum_last", c_sum_last, 1, {3}, {{2, 3, 4}}, 0, 0},
    {"mean_last", c_mean_last, 1, {3}, {{2, 3, 4}}, 0, 0},
    {"gather", c_gather, 1, {2}, {{6, 4}}, 0, 0},
    {"pick_rows", c_pick, 1, {3}, {{2, 3, 4}}, 0, 0},
    {"mask + softmax", c_mask_softmax, 1, {3}, {{2, 3, 3}}, 0, 0},
    {"softmax", c_softmax, 1, {3}, {{2, 3, 5}}, 0, 0},
    {"log_softmax", c_log_softmax, 1, {2}, {{4, 5}}, 0, 0},
    {"cross_entropy", c_cross_entropy, 1, {2}, {{5, 4}}, 0, 0},
    {"cross_entropy_smooth", c_cross_entropy_smooth, 1, {2}, {{5, 4}}, 0, 0},
    {"tanh", c_tanh, 1, {2}, {{3, 4}}, 0, 0},
    {"exp", c_exp, 1, {2}, {{3, 4}}, 0, 0},
    {"sub", c_sub, 2, {2, 2}, {{3, 4}, {3, 4}}, 0, 0},
    {"sub broadcast both ways", c_sub, 2, {2, 2}, {{3, 1}, {1, 4}}, 0, 0},
    {"div", c_div, 2, {2, 2}, {{3, 4}, {3, 4}}, 2, 0},
    {"div broadcast", c_div, 2, {1, 2}, {{4}, {3, 4}}, 2, 0},
    {"add broadcast both ways", c_add, 2, {3, 2}, {{2, 1, 4}, {3, 1}}, 0, 0},
    {"mul broadcast both ways", c_mul, 2, {2, 3}, {{3, 1}, {2, 1, 4}}, 0, 0},
    {"neg", c_neg, 1, {2}, {{3, 4}}, 0, 0},
    {"log", c_log, 1, {2}, {{3, 4}}, 2, 0},
    {"sqrt", c_sqrt, 1, {2}, {{3, 4}}, 2, 0},
    {"pow (x³ and x^-½)", c_pow, 1, {2}, {{3, 4}}, 2, 0},
    {"sigmoid", c_sigmoid, 1, {2}, {{3, 4}}, 0, 0},
    {"gelu", c_gelu, 1, {2}, {{3, 4}}, 0, 0},
    {"silu", c_silu, 1, {2}, {{3, 4}}, 0, 0},
    {"reshape (a view)", c_reshape, 2, {3, 1}, {{2, 3, 4}, {6}}, 0, 0},
    {"permute", c_permute, 1, {3}, {{2, 3, 4}}, 0, 0},
    {"swapdims", c_swapdims, 1, {3}, {{2, 3, 4}}, 0, 0},
    {"concat", c_concat, 2, {3, 3}, {{2, 3, 4}, {2, 2, 4}}, 0, 0},
    {"stack (dim -2)", c_stack, 3, {3, 3, 3}, {{2, 3, 4}, {2, 3, 4}, {2, 3, 4}}, 0, 0},
    {"slice", c_slice, 1, {3}, {{2, 4, 3}}, 0, 0},
    {"sum_dim (keepdim)", c_sum_dim, 1, {3}, {{2, 3, 4}}, 0, 0},
    {"mean_dim", c_mean_dim, 1, {3}, {{2, 3, 4}}, 0, 0},
    {"max_dim", c_max_dim, 1, {3}, {{2, 3, 4}}, 0, 0},
    {"min_dim (keepdim)", c_min_dim, 1, {3}, {{2, 3, 4}}, 0, 0},
    {"logsumexp_dim (keepdim)", c_logsumexp_dim, 1, {3}, {{2, 3, 4}}, 0, 0},
    {"var_dim (correction 1, keepdim)", c_var_dim, 1, {3}, {{2, 3, 4}}, 0, 0},
    {"var_dim (correction 0)", c_var_dim_population, 1, {3}, {{2, 3, 4}}, 0, 0},
    {"layer_norm", c_layer_norm, 3, {3, 1, 1}, {{2, 3, 5}, {5}, {5}}, 0, 0},
    {"layer_norm without gamma, beta", c_layer_norm_plain, 1, {2}, {{4, 6}}, 0, 0},
    {"rms_norm", c_rms_norm, 2, {2, 1}, {{4, 5}, {5}}, 0, 0},
    {"mse", c_mse, 1, {2}, {{3, 4}}, 0, 0},
    {"bce_with_logits", c_bce, 1, {2}, {{3, 4}}, 0, 0},
    {"l1_loss", c_l1, 1, {2}, {{3, 4}}, QUARTERS, 0},
    {"huber_loss (delta 1 and 1.5)", c_huber, 1, {2}, {{3, 4}}, QUARTERS, 0},
    {"dropout", c_dropout, 1, {2}, {{4, 5}}, 0, 0},
    {"relu", c_relu, 1, {2}, {{3, 4}}, 1, 0},
    {"abs", c_abs, 1, {2}, {{3, 4}}, AWAY, 0},
    {"softplus", c_softplus, 1, {2}, {{3, 4}}, 0, 0},
    {"leaky_relu (slopes 0.2 and -0.7)", c_leaky_relu, 1, {2}, {{3, 4}}, AWAY, 0},
    {"clamp (to [-1, 1] and to 1)", c_clamp, 1, {2}, {{4, 5}}, OFF_ONE, 0},
    {"attention softmax(QKᵀ/√d)V",
     c_attention,
     3,
     {3, 3, 3},
     {{2, 3, 4}, {2, 5, 4}, {2, 5, 4}},
     0,
     0},
    {"fused attention (mask, parts)",
     c_attention_fused,
     3,
     {3, 3, 3},
     {{2, 3, 4}, {2, 4, 4}, {2, 4, 5}},
     0,
     0},
    {"fused attention 4-D [B,H,T,d]",
     c_attention_fused4,
     3,
     {4, 4, 4},
     {{2, 2, 3, 4}, {2, 2, 4, 4}, {2, 2, 4, 3}},
     0,
     0},
    {"attention_online, 2x3 blocks",
     c_attention_online,
     3,
     {3, 3, 3},
     {{2, 5, 4}, {2, 7, 4}, {2, 7, 3}},
     0,
     0},
    {"attention_online, causal flag",
     c_attention_online_causal,
     3,
     {3, 3, 3},
     {{2, 7, 4}, {2, 7, 4}, {2, 7, 3}},
     0,
     0},
    {"attention_heads [B,T,3D]", c_attention_heads, 1, {3}, {{2, 3, 12}}, 0, 0},
    {"attention_heads_online, causal", c_attention_heads_online, 1, {3}, {{2, 5, 12}}, 0, 0},
    {"layer: linear", c_linear, 3, {3, 2, 1}, {{LB, LT, LD}, {LD, 5}, {5}}, 0, 0},
    {"layer: mha (causal, padded)",
     c_mha,
     5,
     {3, 2, 1, 2, 1},
     {{LB, LT, LD}, {LD, 3 * LD}, {3 * LD}, {LD, LD}, {LD}},
     0,
     LAYER_TOL},
    {"layer: ffn (linear, gelu, linear)",
     c_ffn,
     5,
     {3, 2, 1, 2, 1},
     {{LB, LT, LD}, {LD, LF}, {LF}, {LF, LD}, {LD}},
     0,
     LAYER_TOL},
    {"layer: Transformer block",
     c_block,
     13,
     {3, 1, 1, 2, 1, 2, 1, 1, 1, 2, 1, 2, 1},
     {{LB, LT, LD},
      {LD},
      {LD},
      {LD, 3 * LD},
      {3 * LD},
      {LD, LD},
      {LD},
      {LD},
      {LD},
      {LD, LF},
      {LF},
      {LF, LD},
      {LD}},
     0,
     LAYER_TOL},
    {"layer: rnn, tanh, 6 steps",
     c_rnn_tanh,
     4,
     {3, 2, 2, 1},
     {{RT, RB, RI}, {RI, RH}, {RH, RH}, {RH}},
     0,
     LAYER_TOL},
    {"layer: rnn_forward, 6 steps",
     c_rnn_sequence,
     5,
     {3, 2, 2, 1, 2},
     {{RT, RB, RI}, {RI, RH}, {RH, RH}, {RH}, {RB, RH}},
     0,
     LAYER_TOL},
    {"layer: rnn, linear, 6 steps",
     c_rnn_linear,
     4,
     {3, 2, 2, 1},
     {{RT, RB, RI}, {RI, RH}, {RH, RH}, {RH}},
     0,
     LAYER_TOL},
    {"layer: lstm, 6 steps",
     c_lstm,
     4,
     {3, 2, 2, 1},
     {{RT, RB, RI}, {RI, 4 * RH}, {RH, 4 * RH}, {4 * RH}},
     0,
     LAYER_TOL},
    {"layer: gru, 6 steps",
     c_gru,
     5,
     {3, 2, 2, 1, 1},
     {{RT, RB, RI}, {RI, 3 * RH}, {RH, 3 * RH}, {3 * RH}, {3 * RH}},
     0,
     LAYER_TOL},
    {"layer: lstm_forward, 6 steps",
     c_lstm_forward,
     6,
     {3, 2, 2, 1, 2, 2},
     {{RT, RB, RI}, {RI, 4 * RH}, {RH, 4 * RH}, {4 * RH}, {RB, RH}, {RB, RH}},
     0,
     LAYER_TOL},
    {"layer: gru_forward, 6 steps",
     c_gru_forward,
     6,
     {3, 2, 2, 1, 1, 2},
     {{RT, RB, RI}, {RI, 3 * RH}, {RH, 3 * RH}, {3 * RH}, {3 * RH}, {RB, RH}},
     0,
     LAYER_TOL},
    {"layer: rnn_forward_ids, 6 steps",
     c_rnn_ids,
     5,
     {2, 2, 2, 1, 2},
     {{RV, RI}, {RI, RH}, {RH, RH}, {RH}, {RB, RH}},
     0,
     LAYER_TOL},
    {"layer: lstm_forward_ids, 6 steps",
     c_lstm_ids,
     6,
     {2, 2, 2, 1, 2, 2},
     {{RV, RI}, {RI, 4 * RH}, {RH, 4 * RH}, {4 * RH}, {RB, RH}, {RB, RH}},
     0,
     LAYER_TOL},
    {"layer: gru_forward_ids, 6 steps",
     c_gru_ids,
     6,
     {2, 2, 2, 1, 1, 2},
     {{RV, RI}, {RI, 3 * RH}, {RH, 3 * RH}, {3 * RH}, {3 * RH}, {RB, RH}},
     0,
     LAYER_TOL},
    {"embedded attention classifier",
     c_model,
     4,
     {2, 2, 2, 2},
     {{6, 3}, {6, 3}, {6, 3}, {3, 4}},
     0,
     0},
    {"embed_attention_rows classifier",
     c_model_rows,
     4,
     {2, 2, 2, 2},
     {{6, 3}, {6, 3}, {6, 3}, {3, 4}},
     0,
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

double qkv_gradcheck_builtin_tol(int i)
{
    if (i < 0 || i >= N_CASES)
        return 0;
    const double own = sizeof(qkv_real) == 4 ? cases[i].float_tol : 0;
    return own > 0 ? own : qkv_gradcheck_default_tol();
}

qkv_status qkv_gradcheck_builtin(int i, const char **name, qkv_gradcheck_result *res)
{
    if (i < 0 || i >= N_CASES || res == NULL)
        return QKV_ERR_ARG;
    gc_run run = {&cases[i], {NULL}};
    if (name != NULL)
        *name = cases[i].name;
    /* inputs seeded by the case's name (FNV-1a), so that adding a case
     * leaves every other case's inputs as they were */
    uint64_t seed = 1469598103934665603u;
    for (const char *c = cases[i].name; *c != '\0'; c++)
        seed = (seed ^ (unsigned char)*c) * 1099511628211u;
    qkv_rng g;
    qkv_rng_seed(&g, seed);
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
            else if (run.c->domain == OFF_ONE) /* |v| in [0, 0.8) or [1.2, inf) */
                v = copysign(fabs(v) < 1 ? 0.8 * fabs(v) : fabs(v) + 0.2, v);
            else if (run.c->domain == QUARTERS)
                v = (2 * floor(2 * v) + 1) / 4;
            run.p[p]->data[j] = (qkv_real)v;
        }
    }
    qkv_tape *t = s == QKV_OK ? qkv_tape_new(0, NULL) : NULL;
    if (s == QKV_OK && t == NULL)
        s = QKV_ERR_NOMEM;
    if (s == QKV_OK)
        s = qkv_gradcheck(t, readout_loss, &run, run.p, run.c->np, 0, 0,
                          qkv_gradcheck_builtin_tol(i), res);
    qkv_tape_free(t);
    for (int p = 0; p < run.c->np; p++)
        qkv_tensor_free(run.p[p]);
    return s;
}
