/*
 * test_torch_layers.c - the layers against PyTorch's own modules, float64
 * on the CPU (scripts/torch_layers.py), where QKV_PYTHON can import torch;
 * elsewhere the test prints that it skipped, and passes.
 *
 * On every kernel set this CPU has, each case builds a layer with its
 * parameters drawn at random (biases and gains too, so that none is the
 * trivial one), runs it forward and backward from a random dy (or from a
 * loss), and writes the parameters, the inputs, the outputs and every
 * gradient in hex floats ('%a', exact) for the script, which loads the
 * same numbers into nn.MultiheadAttention, nn.TransformerEncoderLayer
 * (pre-norm, GELU's tanh form), nn.Embedding, nn.LayerNorm and nn.Linear
 * (the transposes of qkv's [in, out] weights) and recomputes everything.
 * The cases: multi-head attention causal, padded, both, and both at
 * T = QKV_MHA_ONLINE_T (the online form) with its attention weights
 * where it keeps them; a block, causal and padded; a small model
 * (embedding, learned and sinusoidal positions, two blocks, a final
 * norm, a head and cross-entropy with ignored targets); and that model
 * trained a few steps by AdamW with the warm-up and cosine schedule and
 * no weight decay on biases and norms, against torch.optim.AdamW with
 * two parameter groups; and the Elman (tanh), LSTM and GRU cells against
 * nn.RNN, nn.LSTM and nn.GRU, in the sequence form from a given first
 * state and from zeros, and cell by cell, which checks the gates' order
 * and formulas that layers.h says are PyTorch's.
 * QKV_TORCH_VERBOSE=1 prints the errors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests.h"

/* The largest error accepted, per output and gradient: max|qkv - torch|
 * over max|torch| for the tensor (see scripts/torch_layers.py). A layer
 * chains the ops that tests/test_torch.c checks one by one, each within
 * 200 roundings of its inputs' scale; a block is about ten of them, and
 * layer norm and softmax pass an input's error on grown by at most the
 * ratio of the scales (1/σ of a row: a few here, with O(1) inputs and
 * U(±0.5) parameters). So about 2000 roundings: 1.2e-4 in float (ε =
 * 6e-8), where we accept 2e-4, and 2.2e-13 in double, where we accept
 * 1e-12. The worst seen: 1.0e-6 in float (the online form's qkv.bias
 * gradient), 2.5e-15 in double. A missing 1/√d_h, a causal mask off by
 * one, the padding ignored or the second norm put after the FFN give
 * 1e-1 and more; in double, GELU's 0.044715 as 0.0447 gives 3e-6, a
 * norm's eps of 1e-6 for 1e-5 gives 1e-5.
 *
 * Training compares each parameter's displacement after the steps. Adam
 * divides each gradient by its own RMS, so an update carries its
 * gradient's error relative to that entry, not to the tensor's largest:
 * more where a sum cancels (a down-projection row fed by GELUs near 0).
 * And the key bias's gradient is 0 in exact arithmetic (q·b_k shifts a
 * whole row of scores, which softmax ignores), so what qkv and torch
 * compute for it is rounding, about 1e-9 in float and 1e-18 in double:
 * eps = 1e-4 keeps those steps near 1e-5 and 1e-14 of lr (with eps =
 * 1e-8 the float key bias moved by up to lr/2 on noise alone), while
 * the real gradients, 1e-3 to 1e-1, stay above it. We accept 1e-3 in
 * float and 1e-11 in double; the worst seen: 4.0e-5 (the key bias) and
 * 7.3e-14. A bias or a gain decayed gives 4e-2, L2 decay in place of
 * AdamW's decoupled decay 2, no bias correction 1, a warm-up one step
 * ahead 1. */
#ifdef QKV_DOUBLE
#define LAYERS_TOL 1e-12
#define TRAIN_TOL 1e-11
#define ADAM_EPS 1e-4
#else
#define LAYERS_TOL 2e-4
#define TRAIN_TOL 1e-3
#define ADAM_EPS 1e-4
#endif

/* clang-format off */
#define S(...) (const int[]){__VA_ARGS__}
/* clang-format on */

/* A tensor line: TAG NAME NDIM SHAPE... VALUES..., in hex floats. */
static void put(FILE *f, const char *tag, const char *name, int nd, const int *shape,
                const qkv_real *v)
{
    size_t n = 1;
    fprintf(f, "%s %s %d", tag, name, nd);
    for (int d = 0; d < nd; d++) {
        fprintf(f, " %d", shape[d]);
        n *= (size_t)shape[d];
    }
    for (size_t i = 0; i < n; i++)
        fprintf(f, " %a", (double)v[i]);
    fputc('\n', f);
}

static void put_tensor(FILE *f, const char *tag, const char *name, const qkv_tensor *x)
{
    ck_assert(!qkv_tensor_is_nil(x));
    put(f, tag, name, x->ndim, x->shape, x->data);
}

/* Integers (ids, targets) as a line of values. */
static void put_ints(FILE *f, const char *tag, int nd, const int *shape, const int *v)
{
    size_t n = 1;
    for (int d = 0; d < nd; d++)
        n *= (size_t)shape[d];
    qkv_real *r = malloc(n * sizeof *r);
    ck_assert_ptr_nonnull(r);
    for (size_t i = 0; i < n; i++)
        r[i] = (qkv_real)v[i];
    put(f, tag, tag, nd, shape, r);
    free(r);
}

/* Every parameter of the list, with this tag (values), and if grads, a
 * "g" line of its gradient. */
static void put_params(FILE *f, const char *tag, qkv_params *p, int grads)
{
    for (int i = 0; i < qkv_params_count(p); i++) {
        const char *name;
        qkv_tensor *x = qkv_params_at(p, i, &name);
        put_tensor(f, tag, name, x);
        if (grads)
            put(f, "g", name, x->ndim, x->shape, x->grad);
    }
}

static void fill_normal(qkv_tensor *x, qkv_rng *g)
{
    for (size_t i = 0; i < x->numel; i++)
        x->data[i] = (qkv_real)qkv_rng_normalvariate(g, 0, 1);
}

/* Every parameter U[-0.5, 0.5), the norms' gains 1 + U[-0.5, 0.5). */
static void randomise(qkv_params *p, qkv_rng *g)
{
    for (int i = 0; i < qkv_params_count(p); i++) {
        const char *name;
        qkv_tensor *x = qkv_params_at(p, i, &name);
        ck_assert_int_eq(qkv_init_tensor(x, (qkv_init){QKV_INIT_UNIFORM, -0.5, 0.5}, g, NULL),
                         QKV_OK);
        const char *last = strrchr(name, '.');
        if (strcmp(last, ".weight") == 0 && x->ndim == 1)
            for (size_t j = 0; j < x->numel; j++)
                x->data[j] += 1;
    }
}

/* The padding mask [B,T] on the tape: item 0 drops key 2 (a hole), item
 * 1 its last two keys (B >= 2, T >= 4); row b >= 2 drops nothing. No
 * query loses every key, causal or not: key 0 stays. */
static qkv_tensor *pad_mask(qkv_tape *t, int B, int T)
{
    qkv_tensor *m = qkv_tape_tensor(t, 2, S(B, T), 0);
    ck_assert(!qkv_tensor_is_nil(m));
    for (int b = 0; b < B; b++)
        for (int j = 0; j < T; j++)
            m->data[b * T + j] = (b == 0 && j == 2) || (b == 1 && j >= T - 2) ? -INFINITY : 0;
    return m;
}

enum { CAUSAL = 1, PAD = 2, WEIGHTS = 4 };

/* Writes the seeds of y (random) and runs backward from them. */
static void backward_random(FILE *f, qkv_tape *t, qkv_tensor *y, qkv_rng *g)
{
    ck_assert_msg(!qkv_tensor_is_nil(y), "%s", qkv_tape_error(t));
    qkv_real *dy = malloc(y->numel * sizeof *dy);
    ck_assert_ptr_nonnull(dy);
    for (size_t i = 0; i < y->numel; i++)
        dy[i] = (qkv_real)qkv_rng_normalvariate(g, 0, 1);
    ck_assert_int_eq(qkv_backward_from(t, y, dy, y->numel), QKV_OK);
    put(f, "dy", "y", y->ndim, y->shape, dy);
    free(dy);
}

/* A layer case's start: g seeded with seed, p's parameters drawn from it,
 * then, on the reset tape, x [B,T,D] from it (with a gradient) and the
 * padding mask in *pad when flags has PAD (else NULL). Returns x. */
static qkv_tensor *case_input(qkv_tape *t, qkv_params *p, qkv_rng *g, uint64_t seed, int B, int T,
                              int D, int flags, qkv_tensor **pad)
{
    qkv_rng_seed(g, seed);
    randomise(p, g);
    qkv_tape_reset(t);
    qkv_tensor *x = qkv_tape_tensor(t, 3, S(B, T, D), 1);
    fill_normal(x, g);
    *pad = flags & PAD ? pad_mask(t, B, T) : NULL;
    return x;
}

/* A layer case's end, after its header: x, the mask, y and the weights
 * (attn, unless NULL), then a random upstream gradient from g, x's and
 * every parameter's gradient; p is freed. */
static void case_end(FILE *f, qkv_tape *t, qkv_params *p, qkv_rng *g, qkv_tensor *x,
                     qkv_tensor *pad, qkv_tensor *y, qkv_tensor *attn)
{
    put_tensor(f, "x", "x", x);
    if (pad != NULL)
        put_tensor(f, "pad", "pad", pad);
    put_tensor(f, "y", "y", y);
    if (attn != NULL)
        put_tensor(f, "y", "attn", attn);
    qkv_params_zero_grad(p);
    backward_random(f, t, y, g);
    put(f, "g", "x", x->ndim, x->shape, x->grad);
    put_params(f, "p", p, 1);
    fputs("end\n", f);
    qkv_params_free(p);
}

/* Multi-head attention over x [B,T,D], H heads. */
static void mha_case(FILE *f, qkv_tape *t, const char *label, int B, int T, int D, int H, int flags,
                     uint64_t seed)
{
    qkv_params *p = qkv_params_new(seed, NULL);
    ck_assert_ptr_nonnull(p);
    qkv_mha m;
    ck_assert_int_eq(qkv_mha_init(&m, p, "attn", D, H, flags & CAUSAL, NULL), QKV_OK);
    qkv_rng g;
    qkv_tensor *pad, *x = case_input(t, p, &g, seed, B, T, D, flags, &pad);
    qkv_mha_parts parts;
    qkv_tensor *y = qkv_mha_forward(t, &m, x, pad, flags & WEIGHTS ? &parts : NULL);
    fprintf(f, "case %s-%s mha heads=%d causal=%d\n", qkv_kernels_name(), label, H,
            (flags & CAUSAL) != 0);
    case_end(f, t, p, &g, x, pad, y, flags & WEIGHTS ? parts.attn : NULL);
}

/* The pre-norm block over x [B,T,D]. */
static void block_case(FILE *f, qkv_tape *t, const char *label, int B, int T, int D, int H,
                       int hidden, int flags, uint64_t seed)
{
    qkv_params *p = qkv_params_new(seed, NULL);
    ck_assert_ptr_nonnull(p);
    qkv_block b;
    ck_assert_int_eq(qkv_block_init(&b, p, "blk", D, H, hidden, flags & CAUSAL, NULL), QKV_OK);
    qkv_rng g;
    qkv_tensor *pad, *x = case_input(t, p, &g, seed, B, T, D, flags, &pad);
    qkv_tensor *y = qkv_block_forward(t, &b, x, pad, NULL);
    fprintf(f, "case %s-%s block heads=%d causal=%d\n", qkv_kernels_name(), label, H,
            (flags & CAUSAL) != 0);
    case_end(f, t, p, &g, x, pad, y, NULL);
}

/* The small model: tokens of V kinds, B sentences of T, causal blocks
 * over padded sentences. */
enum { V = 11, D = 8, H = 2, HIDDEN = 16, MAX_LEN = 8, NBLOCKS = 2, B = 2, T = 6 };

typedef struct model {
    qkv_params *p;
    qkv_embedding emb, pos;
    qkv_block blk[NBLOCKS];
    qkv_norm lnf;
    qkv_linear head;
    qkv_tensor *pe; /* the sinusoidal table [MAX_LEN, D] */
    int ids[B * T], tg[B * T];
} model;

static void model_init(model *m, uint64_t seed)
{
    m->p = qkv_params_new(seed, NULL);
    ck_assert_ptr_nonnull(m->p);
    ck_assert_int_eq(qkv_embedding_init(&m->emb, m->p, "emb", V, D, NULL), QKV_OK);
    ck_assert_int_eq(qkv_positions_init(&m->pos, m->p, "pos", MAX_LEN, D, NULL), QKV_OK);
    for (int i = 0; i < NBLOCKS; i++) {
        char name[16];
        snprintf(name, sizeof name, "blk%d", i);
        ck_assert_int_eq(qkv_block_init(&m->blk[i], m->p, name, D, H, HIDDEN, 1, NULL), QKV_OK);
    }
    ck_assert_int_eq(qkv_norm_init(&m->lnf, m->p, "lnf", D, NULL), QKV_OK);
    ck_assert_int_eq(qkv_linear_init(&m->head, m->p, "head", D, V, 1, NULL), QKV_OK);
    qkv_rng g;
    qkv_rng_seed(&g, seed);
    randomise(m->p, &g);
    m->pe = qkv_tensor_new(2, S(MAX_LEN, D), 0, NULL);
    ck_assert(!qkv_tensor_is_nil(m->pe));
    ck_assert_int_eq(qkv_sinusoidal_positions(m->pe, NULL), QKV_OK);
    /* the next token is the target; padded positions (as pad_mask's)
     * and the last are ignored */
    for (int i = 0; i < B * T; i++)
        m->ids[i] = (int)(qkv_rng_random(&g) * V);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < T; j++) {
            int padded = (b == 0 && j == 2) || (b == 1 && j >= T - 2);
            m->tg[b * T + j] = padded || j == T - 1 ? QKV_IGNORE : m->ids[b * T + j + 1];
        }
}

static void model_free(model *m)
{
    qkv_params_free(m->p);
    qkv_tensor_free(m->pe);
}

/* The loss on a reset tape; *logits gets the logits [B,T,V]. */
static qkv_tensor *model_loss(qkv_tape *t, const model *m, qkv_tensor **pad, qkv_tensor **logits)
{
    qkv_tape_reset(t);
    *pad = pad_mask(t, B, T);
    qkv_tensor *x = qkv_embedding_forward(t, &m->emb, m->ids, 2, S(B, T));
    x = qkv_add_positions(t, qkv_add_positions(t, x, m->pos.weight), m->pe);
    for (int i = 0; i < NBLOCKS; i++)
        x = qkv_block_forward(t, &m->blk[i], x, *pad, NULL);
    *logits = qkv_linear_forward(t, &m->head, qkv_norm_forward(t, &m->lnf, x));
    qkv_tensor *loss = qkv_cross_entropy(t, *logits, m->tg);
    ck_assert_msg(!qkv_tensor_is_nil(loss), "%s", qkv_tape_error(t));
    return loss;
}

static void put_model_inputs(FILE *f, const model *m, const qkv_tensor *pad)
{
    put_ints(f, "ids", 2, S(B, T), m->ids);
    put_ints(f, "tg", 2, S(B, T), m->tg);
    put_tensor(f, "pad", "pad", pad);
}

static void model_case(FILE *f, qkv_tape *t, uint64_t seed)
{
    model m;
    model_init(&m, seed);
    qkv_tensor *pad, *logits;
    qkv_tensor *loss = model_loss(t, &m, &pad, &logits);
    qkv_params_zero_grad(m.p);
    ck_assert_int_eq(qkv_backward(t, loss), QKV_OK);
    fprintf(f, "case %s-model model heads=%d blocks=%d causal=1\n", qkv_kernels_name(), H, NBLOCKS);
    put_model_inputs(f, &m, pad);
    put_tensor(f, "y", "loss", loss);
    put_tensor(f, "y", "logits", logits);
    put_tensor(f, "y", "pe", m.pe);
    put_params(f, "p", m.p, 1);
    fputs("end\n", f);
    model_free(&m);
}

/* STEPS of AdamW on the model's loss, the rate from
 * qkv_lr_warmup_cosine before each step, the list's decay settings (on
 * for the weights and embeddings only). */
enum { STEPS = 6, WARMUP = 2 };

static void train_case(FILE *f, qkv_tape *t, uint64_t seed)
{
    model m;
    model_init(&m, seed);
    const double lr_max = 0.02, lr_min = 0.002;
    qkv_optim_config c = qkv_optim_defaults(QKV_ADAMW);
    c.lr = lr_max;
    c.beta1 = 0.9;
    c.beta2 = 0.99;
    c.eps = ADAM_EPS;
    c.weight_decay = 0.1;
    qkv_optim *o = qkv_params_optim(m.p, &c, NULL);
    ck_assert_ptr_nonnull(o);
    fprintf(f,
            "case %s-train train heads=%d blocks=%d causal=1 steps=%d warmup=%d total=%d "
            "lr_max=%a lr_min=%a beta1=%a beta2=%a eps=%a wd=%a\n",
            qkv_kernels_name(), H, NBLOCKS, STEPS, WARMUP, STEPS, lr_max, lr_min, c.beta1, c.beta2,
            c.eps, c.weight_decay);
    put_params(f, "p", m.p, 0);
    qkv_real losses[STEPS];
    qkv_tensor *pad = NULL, *logits;
    for (int s = 0; s < STEPS; s++) {
        qkv_tensor *loss = model_loss(t, &m, &pad, &logits);
        losses[s] = loss->data[0];
        if (s == 0)
            put_model_inputs(f, &m, pad);
        qkv_params_zero_grad(m.p);
        ck_assert_int_eq(qkv_backward(t, loss), QKV_OK);
        ck_assert_int_eq(
            qkv_optim_set_lr(o, qkv_lr_warmup_cosine(s, WARMUP, STEPS, lr_max, lr_min)), QKV_OK);
        ck_assert_int_eq(qkv_optim_step(o), QKV_OK);
    }
    put(f, "loss", "loss", 1, S(STEPS), losses);
    put_params(f, "q", m.p, 0);
    fputs("end\n", f);
    qkv_optim_free(o);
    model_free(&m);
}

/* The recurrent cells, as nn.RNN, nn.LSTM and nn.GRU run them. */
enum { ELMAN, LSTM, GRU };
enum { RB = 3, RT = 5, RIN = 4, RH = 6 };

/* A recurrent case: the cell of kind over x [RT,RB,RIN] from a random
 * first state (h0, and c0 for the LSTM; each with a gradient) or from
 * zeros; the sequence form, or the cell called step by step (cells).
 * Outputs: every step's state, y [RT·RB, RH] (nn.RNN's output, [T,B,H]),
 * and the LSTM's last c; backward from L = Σ dy⊙y (+ Σ dc⊙c) with random
 * dy (and dc). */
static void recurrent_case(FILE *f, qkv_tape *t, const char *label, int kind, int h0_given,
                           int cells, uint64_t seed)
{
    static const char *const kinds[] = {"rnn", "lstm", "gru"};
    qkv_params *p = qkv_params_new(seed, NULL);
    ck_assert_ptr_nonnull(p);
    qkv_rnn rnn;
    qkv_lstm lstm;
    qkv_gru gru;
    ck_assert_int_eq(kind == ELMAN  ? qkv_rnn_init(&rnn, p, "cell", RIN, RH, QKV_RNN_TANH, NULL)
                     : kind == LSTM ? qkv_lstm_init(&lstm, p, "cell", RIN, RH, NULL)
                                    : qkv_gru_init(&gru, p, "cell", RIN, RH, NULL),
                     QKV_OK);
    qkv_rng g;
    qkv_tensor *pad, *x = case_input(t, p, &g, seed, RT, RB, RIN, 0, &pad);
    qkv_tensor *h0 = NULL, *c0 = NULL;
    if (h0_given) {
        h0 = qkv_tape_tensor(t, 2, S(RB, RH), 1);
        fill_normal(h0, &g);
        if (kind == LSTM) {
            c0 = qkv_tape_tensor(t, 2, S(RB, RH), 1);
            fill_normal(c0, &g);
        }
    }
    qkv_tensor *states[RT], *c = NULL;
    qkv_lstm_state s = {h0, c0}, ls[RT];
    if (!cells && kind == ELMAN) {
        qkv_rnn_forward(t, &rnn, x, h0, states);
    } else if (!cells && kind == LSTM) {
        c = qkv_lstm_forward(t, &lstm, x, &s, ls).c;
    } else if (!cells) {
        qkv_gru_forward(t, &gru, x, h0, states);
    } else {
        qkv_tensor *h = h0;
        for (int step = 0; step < RT; step++) {
            qkv_tensor *xs = qkv_reshape(t, qkv_slice(t, x, 0, step, 1), 2, S(RB, RIN));
            if (kind == ELMAN)
                h = qkv_rnn_cell(t, &rnn, xs, h);
            else if (kind == GRU)
                h = qkv_gru_cell(t, &gru, xs, h);
            else
                c = (ls[step] = s = qkv_lstm_cell(t, &lstm, xs, &s)).c;
            if (kind != LSTM)
                states[step] = h;
        }
    }
    if (kind == LSTM)
        for (int step = 0; step < RT; step++)
            states[step] = ls[step].h;
    qkv_tensor *y = qkv_concat(t, RT, states, 0);
    ck_assert_msg(!qkv_tensor_is_nil(y), "%s: %s", label, qkv_tape_error(t));
    fprintf(f, "case %s-%s %s\n", qkv_kernels_name(), label, kinds[kind]);
    put_tensor(f, "x", "x", x);
    if (h0 != NULL)
        put_tensor(f, "x", "h0", h0);
    if (c0 != NULL)
        put_tensor(f, "x", "c0", c0);
    put_tensor(f, "y", "y", y);
    if (c != NULL)
        put_tensor(f, "y", "c", c);
    /* L = Σ dy⊙y (+ Σ dc⊙c), the seeds random */
    qkv_tensor *outs[2] = {y, c}, *loss = NULL;
    for (int o = 0; o < (c != NULL ? 2 : 1); o++) {
        qkv_tensor *d = qkv_tape_tensor(t, outs[o]->ndim, outs[o]->shape, 0);
        fill_normal(d, &g);
        put_tensor(f, "dy", o == 0 ? "y" : "c", d);
        qkv_tensor *term = qkv_sum(t, qkv_mul(t, d, outs[o]));
        loss = loss == NULL ? term : qkv_add(t, loss, term);
    }
    qkv_params_zero_grad(p);
    ck_assert_msg(qkv_backward(t, loss) == QKV_OK, "%s: %s", label, qkv_tape_error(t));
    put(f, "g", "x", x->ndim, x->shape, x->grad);
    if (h0 != NULL)
        put(f, "g", "h0", h0->ndim, h0->shape, h0->grad);
    if (c0 != NULL)
        put(f, "g", "c0", c0->ndim, c0->shape, c0->grad);
    put_params(f, "p", p, 1);
    fputs("end\n", f);
    qkv_params_free(p);
}

static void write_cases(FILE *f, qkv_tape *t)
{
    mha_case(f, t, "mha_causal", 2, 5, 8, 2, CAUSAL | WEIGHTS, 1);
    mha_case(f, t, "mha_pad", 2, 5, 8, 2, PAD | WEIGHTS, 2);
    mha_case(f, t, "mha_causal_pad", 3, 5, 12, 3, CAUSAL | PAD | WEIGHTS, 3);
    mha_case(f, t, "mha_online", 2, QKV_MHA_ONLINE_T, 8, 2, CAUSAL | PAD, 4);
    block_case(f, t, "block", 2, 5, 8, 2, 16, 0, 5);
    block_case(f, t, "block_causal_pad", 2, 5, 8, 2, 16, CAUSAL | PAD, 6);
    model_case(f, t, 7);
    train_case(f, t, 8);
    recurrent_case(f, t, "rnn", ELMAN, 1, 0, 9);
    recurrent_case(f, t, "rnn_from_zero", ELMAN, 0, 0, 10);
    recurrent_case(f, t, "rnn_cells", ELMAN, 1, 1, 11);
    recurrent_case(f, t, "lstm", LSTM, 1, 0, 12);
    recurrent_case(f, t, "lstm_from_zero", LSTM, 0, 0, 13);
    recurrent_case(f, t, "lstm_cells", LSTM, 1, 1, 14);
    recurrent_case(f, t, "gru", GRU, 1, 0, 15);
    recurrent_case(f, t, "gru_from_zero", GRU, 0, 0, 16);
    recurrent_case(f, t, "gru_cells", GRU, 1, 1, 17);
}

/* The cases' file: made and removed by the unchecked fixture, in the
 * parent, so that a failed assertion in the forked test leaves nothing. */
static char layers_file[] = "/tmp/qkv_torch_layers_XXXXXX";

static void make_layers_file(void)
{
    int fd = mkstemp(layers_file);
    ck_assert_int_ge(fd, 0);
    close(fd);
}

static void remove_layers_file(void)
{
    unlink(layers_file);
}

START_TEST(test_layers_match_pytorch)
{
    if (torch_missing())
        return;
    FILE *f = fopen(layers_file, "w");
    ck_assert_ptr_nonnull(f);
    qkv_tape *t = qkv_tape_new(0, NULL);
    ck_assert_ptr_nonnull(t);
    static const char *sets[] = {"portable", "avx2", "avx512"};
    for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++)
        if (qkv_kernels_use(sets[s], NULL) == QKV_OK)
            write_cases(f, t);
    qkv_kernels_use("auto", NULL);
    ck_assert_int_eq(fclose(f), 0);
    qkv_tape_free(t);
    char options[64];
    snprintf(options, sizeof options, "--tol %g --tol-train %g", LAYERS_TOL, TRAIN_TOL);
    torch_run_script("torch_layers.py", options, layers_file);
}
END_TEST

TCase *torch_layers_tcase(void)
{
    TCase *tc = tcase_create("pytorch_layers");
    tcase_set_timeout(tc, 60);
    tcase_add_unchecked_fixture(tc, make_layers_file, remove_layers_file);
    tcase_add_test(tc, test_layers_match_pytorch);
    return tc;
}
