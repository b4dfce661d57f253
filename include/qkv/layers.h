/*
 * layers.h - the layers a Transformer is built from: linear, embedding,
 * layer norm, multi-head attention, the feed-forward network, a pre-norm
 * Transformer block, and positional encodings; and the recurrent cells
 * attention replaced: Elman RNN, LSTM and GRU.
 *
 * Each layer is a small struct that points at parameters in a qkv_params
 * list (params.h): qkv_*_init adds them under a name prefix ("block0.attn"
 * gives "block0.attn.qkv.weight" and so on; "" gives bare names, "weight"
 * and "bias", as a lone PyTorch module's state_dict has), and the forward
 * function records ops on a tape. The structs own nothing; the list does.
 *
 * An init that fails adds nothing to the list and leaves its layer zeroed
 * (unless the layer is NULL), whatever it held before. The forward of a
 * zeroed layer, or of one no init has filled (declared `= {0}`), records
 * "<layer>: the layer is not initialised (its init failed or was never
 * called)" on the tape (QKV_ERR_ARG) and returns nil; so do a zeroed
 * recurrent cell's steps and sequences.
 *
 * Each layer keeps its prefix as its name, and an error in its forward (or
 * a cell's step) names the innermost layer it happened in: "linear
 * 'block0.ffn.up': affine: x [2,5,16], w [8,32], ...", "norm 'block0.ln1':
 * layer_norm: ...", or "mha 'block0.attn': x [5,16] must be [B,T,16]" for
 * a layer's own check.
 */
#ifndef QKV_LAYERS_H
#define QKV_LAYERS_H

#include "qkv/ops.h"
#include "qkv/params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Room for a layer's name, its init's prefix: any prefix that leaves room
 * for its parameters' names (127 bytes) fits. A layer made of layers
 * measures the prefix against its longest name (a block's
 * PREFIX.attn.proj.weight), and its refusal names that. */
#define QKV_LAYER_NAME_BYTES 128

/* ---- linear ------------------------------------------------------------- */

/* y = x·W + b: W [in, out] (so x·W needs no transpose), b [out] or none.
 * W starts U(-1/√in, 1/√in), PyTorch's default for nn.Linear, and b at
 * zero. Parameters: PREFIX.weight, PREFIX.bias. */
typedef struct qkv_linear {
    qkv_tensor *weight; /* (in, out) */
    qkv_tensor *bias;   /* (out) or NULL */
    int in, out;
    char name[QKV_LAYER_NAME_BYTES]; /* the init's prefix, for messages */
} qkv_linear;

qkv_status qkv_linear_init(qkv_linear *l, qkv_params *p, const char *prefix, int in, int out,
                           int bias, qkv_error *err);

/* x [..., in] -> [..., out]. */
qkv_tensor *qkv_linear_forward(qkv_tape *t, const qkv_linear *l, qkv_tensor *x);

/* ---- embedding ---------------------------------------------------------- */

/* A table of rows [n, d], N(0, 0.02²) at the start (GPT-2's). Parameter:
 * PREFIX.weight. */
typedef struct qkv_embedding {
    qkv_tensor *weight;              /* (n, d) */
    char name[QKV_LAYER_NAME_BYTES]; /* the init's prefix, for messages */
} qkv_embedding;

qkv_status qkv_embedding_init(qkv_embedding *e, qkv_params *p, const char *prefix, int n, int d,
                              qkv_error *err);

/* The rows of ids (numel(shape) of them, 1 to 3 dimensions): [shape..., d].
 * Errors as qkv_gather's (NULL ids: QKV_ERR_ARG), under the layer's name. */
qkv_tensor *qkv_embedding_forward(qkv_tape *t, const qkv_embedding *e, const int *ids, int ndim,
                                  const int *shape);

/* ---- layer norm --------------------------------------------------------- */

/* Layer norm over the last dimension with a gain γ (1 at the start) and a
 * bias β (0). Parameters: PREFIX.weight (γ), PREFIX.bias (β). */
typedef struct qkv_norm {
    qkv_tensor *gamma, *beta;        /* (d) */
    double eps;                      /* 1e-5 */
    char name[QKV_LAYER_NAME_BYTES]; /* the init's prefix, for messages */
} qkv_norm;

qkv_status qkv_norm_init(qkv_norm *n, qkv_params *p, const char *prefix, int d, qkv_error *err);
qkv_tensor *qkv_norm_forward(qkv_tape *t, const qkv_norm *n, qkv_tensor *x);

/* ---- multi-head attention ----------------------------------------------- */

/* Multi-head self-attention over x [B,T,D]: one [D,3D] projection makes
 * Q, K and V together (PREFIX.qkv), each split into H heads of width
 * d_h = D/H; softmax(Q·Kᵀ/√d_h + mask)·V runs for every head at once
 * (qkv_attention_heads, which reads the heads from the projection and
 * writes them merged, [B,T,D], with the bits of qkv_attention on
 * [B,H,T,d_h]); the result is projected (PREFIX.proj). With causal set,
 * position i sees positions j <= i only. */
typedef struct qkv_mha {
    qkv_linear qkv;  /* (D, 3D): Q, K, V side by side */
    qkv_linear proj; /* (D, D) */
    int d_model, heads, causal;
    char name[QKV_LAYER_NAME_BYTES]; /* the init's prefix, for messages */
} qkv_mha;

qkv_status qkv_mha_init(qkv_mha *m, qkv_params *p, const char *prefix, int d_model, int heads,
                        int causal, qkv_error *err);

/* The attention weights of every head, as the fused op returns them. */
typedef struct qkv_mha_parts {
    qkv_tensor *attn;   /* [B,H,T,T]: row i is where position i looks */
    qkv_tensor *scores; /* [B,H,T,T]: Q·Kᵀ/√d_h before the mask */
} qkv_mha_parts;

/* x [B,T,D] -> [B,T,D]. pad is NULL or [B,T] of 0 (a real token) and
 * -INFINITY (padding, which no position may look at); it is combined with
 * the causal mask. Any other value in it (a 0/1 flag, as PyTorch's
 * key_padding_mask is, or NaN) is refused with QKV_ERR_ARG, naming its
 * place. parts may be NULL: then from T = QKV_MHA_ONLINE_T on
 * the heads take the online form (qkv_attention_heads_online), which
 * keeps no T×T matrices and gives the same results up to rounding. */
#define QKV_MHA_ONLINE_T 512
qkv_tensor *qkv_mha_forward(qkv_tape *t, const qkv_mha *m, qkv_tensor *x, const qkv_tensor *pad,
                            qkv_mha_parts *parts);

/* The padding mask of a batch of sequences padded to len: [batch,len] on
 * t, without a gradient; entry [b,j] is 0 for j < lengths[b] (a token)
 * and -INFINITY from there on (padding), as qkv_mha_forward's pad takes
 * it. A length of 0 hides every key of its sequence: its outputs are then
 * the output projection's bias alone (PyTorch's are NaN), and its
 * gradients are finite. NULL lengths, a batch or len below 1, or a length
 * outside [0, len] fail the tape (QKV_ERR_ARG, naming the sequence); a
 * tape already failed gives the nil tensor. The
 * mask lives until the tape's next reset, as every tape tensor does. */
qkv_tensor *qkv_padding_mask(qkv_tape *t, int batch, int len, const int *lengths);

/* ---- feed-forward ------------------------------------------------------- */

/* linear (D -> hidden), GELU, linear (hidden -> D): PREFIX.up, PREFIX.down. */
typedef struct qkv_ffn {
    qkv_linear up, down;
    char name[QKV_LAYER_NAME_BYTES]; /* the init's prefix, for messages */
} qkv_ffn;

qkv_status qkv_ffn_init(qkv_ffn *f, qkv_params *p, const char *prefix, int d_model, int hidden,
                        qkv_error *err);
qkv_tensor *qkv_ffn_forward(qkv_tape *t, const qkv_ffn *f, qkv_tensor *x);

/* ---- the Transformer block ---------------------------------------------- */

/* Pre-norm, as GPT-2: x + MHA(LN(x)), then x + FFN(LN(x)). Parameters under
 * PREFIX.ln1, PREFIX.attn, PREFIX.ln2, PREFIX.ffn. */
typedef struct qkv_block {
    qkv_norm ln1, ln2;
    qkv_mha attn;
    qkv_ffn ffn;
    char name[QKV_LAYER_NAME_BYTES]; /* the init's prefix, for messages */
} qkv_block;

qkv_status qkv_block_init(qkv_block *b, qkv_params *p, const char *prefix, int d_model, int heads,
                          int hidden, int causal, qkv_error *err);

/* x [B,T,D] -> [B,T,D]; pad and parts as for qkv_mha_forward. */
qkv_tensor *qkv_block_forward(qkv_tape *t, const qkv_block *b, qkv_tensor *x, const qkv_tensor *pad,
                              qkv_mha_parts *parts);

/* ---- positional encodings ----------------------------------------------- */

/* The sinusoidal table of "Attention Is All You Need" into pe [T, D]:
 *   pe[pos, 2i] = sin(pos / 10000^(2i/D)),  pe[pos, 2i+1] = cos(pos / 10000^(2i/D)).
 * Computed in double. QKV_ERR_SHAPE unless pe is 2-D. */
qkv_status qkv_sinusoidal_positions(qkv_tensor *pe, qkv_error *err);

/* Learned positions: a [max_len, D] parameter PREFIX.weight drawn from
 * N(0, 0.02²), as GPT-2 starts its position table. */
qkv_status qkv_positions_init(qkv_embedding *e, qkv_params *p, const char *prefix, int max_len,
                              int d, qkv_error *err);

/* x [..., T, D] plus the first T rows of a position table [max_len, D]:
 * a learned one (its gradient flows) or a fixed sinusoidal one. */
qkv_tensor *qkv_add_positions(qkv_tape *t, qkv_tensor *x, qkv_tensor *table);

/* Learned positions are an embedding of the positions 0..T-1: a table
 * [T_max, D] added to the token embeddings (qkv_embedding_init, and
 * qkv_add of its rows, or of its first T rows by qkv_slice). */

/* ---- recurrent cells ---------------------------------------------------- */
/*
 * One time step each; a loop over the steps unrolls the recurrence on the
 * tape, and qkv_backward is then backpropagation through time. Every
 * weight and bias starts U(-1/√H, 1/√H), as PyTorch's nn.RNN, nn.LSTM and
 * nn.GRU do, and the gates follow PyTorch's order and formulas, so weights
 * move between the two by transposing (qkv stores W_x as [in, kH] and W_h
 * as [H, kH], the transposes of PyTorch's weight_ih and weight_hh).
 *
 * Each cell has two entry points: one takes the input x [B, in], the other
 * its projection xw = x·W_x [B, kH] (for a one-hot or embedded input that
 * is a row gather: qkv_gather(cell.wx, ids, ...)). h (and c) NULL means a
 * zero state, the first step's.
 */

/* Elman: h' = act(x·W_x + h·W_h + b), act tanh or the identity (a linear
 * recurrence, whose gradient through time is exactly a power of W_h).
 * Parameters: PREFIX.wx [in,H], PREFIX.wh [H,H], PREFIX.b [H]. */
typedef enum qkv_rnn_act { QKV_RNN_TANH, QKV_RNN_LINEAR } qkv_rnn_act;

typedef struct qkv_rnn {
    qkv_tensor *wx, *wh, *b;
    int in, hidden;
    qkv_rnn_act act;
    char name[QKV_LAYER_NAME_BYTES]; /* the init's prefix, for messages */
} qkv_rnn;

qkv_status qkv_rnn_init(qkv_rnn *r, qkv_params *p, const char *prefix, int in, int hidden,
                        qkv_rnn_act act, qkv_error *err);
qkv_tensor *qkv_rnn_cell(qkv_tape *t, const qkv_rnn *r, qkv_tensor *x, qkv_tensor *h);
qkv_tensor *qkv_rnn_cell_projected(qkv_tape *t, const qkv_rnn *r, qkv_tensor *xw, qkv_tensor *h);

/* The whole sequence, as nn.RNN runs it: x [T,B,in] (time-major, nn.RNN's
 * default), h0 [B,H] or NULL (zero). Every step's x·W_x + b is one product
 * over the T·B rows, so W_x is read once and its gradient is one product
 * too; then each step adds h·W_h and applies the activation. The same
 * values as T calls of qkv_rnn_cell, up to the rounding of the products'
 * sums. Returns the last state [B,H]; states, if not NULL, receives each
 * step's state (T entries, [B,H] each). On a failure it returns nil;
 * states then holds nil in all T entries if the steps had begun, and is
 * untouched if the inputs were refused first (a wrong shape, or a tape
 * that had already failed). */
qkv_tensor *qkv_rnn_forward(qkv_tape *t, const qkv_rnn *r, qkv_tensor *x, qkv_tensor *h0,
                            qkv_tensor **states);

/* Tokens in: the sequence whose step s, sentence b reads row
 * ids[s·batch + b] of an embedding table [V,in] (ids [steps,batch],
 * time-major, each in [0,V)); the same as qkv_rnn_forward of
 * qkv_gather(t, table, ids, 2, (int[]){steps, batch}). When the table has
 * fewer rows than there are tokens (V < steps·batch, as for characters or
 * a small vocabulary), it projects the table instead of the tokens:
 * table·W_x + b once, V rows, then each token's row of that, a gather.
 * That is V/(steps·batch) of the input projection's work forward and
 * backward (a tanh RNN of 64 steps of 32 sentences over 64 tokens: about
 * half of the whole step's products), which nn.Embedding feeding nn.RNN
 * does not do. The values are qkv_rnn_forward's up to the rounding of the
 * products' sums: the table's gradient then goes through W_x once per
 * table row, not once per token. The first state, states and failures as
 * qkv_rnn_forward's. Checked before any work, in this order: the table,
 * the ids (not NULL, their count), each id in [0,V) (the error names its
 * step and sentence, not the gather's position), then h0. */
qkv_tensor *qkv_rnn_forward_ids(qkv_tape *t, const qkv_rnn *r, qkv_tensor *table, const int *ids,
                                int steps, int batch, qkv_tensor *h0, qkv_tensor **states);

/* LSTM: z = x·W_x + h·W_h + b [B,4H], split into the gates i, f, g, o:
 *   c' = σ(z_f)∘c + σ(z_i)∘tanh(z_g),   h' = σ(z_o)∘tanh(c').
 * Parameters: PREFIX.wx [in,4H], PREFIX.wh [H,4H], PREFIX.b [4H] (PyTorch's
 * b_ih + b_hh in one). */
typedef struct qkv_lstm {
    qkv_tensor *wx, *wh, *b;
    int in, hidden;
    char name[QKV_LAYER_NAME_BYTES]; /* the init's prefix, for messages */
} qkv_lstm;

/* The state of an LSTM: both [B,H]. */
typedef struct qkv_lstm_state {
    qkv_tensor *h, *c;
} qkv_lstm_state;

qkv_status qkv_lstm_init(qkv_lstm *l, qkv_params *p, const char *prefix, int in, int hidden,
                         qkv_error *err);
/* The next state from x (or its projection) and s (NULL: zeros; so is an
 * h or c of s that is NULL, as in a zeroed qkv_lstm_state). Failures give
 * nil tensors and leave the reason on the tape. */
qkv_lstm_state qkv_lstm_cell(qkv_tape *t, const qkv_lstm *l, qkv_tensor *x,
                             const qkv_lstm_state *s);
qkv_lstm_state qkv_lstm_cell_projected(qkv_tape *t, const qkv_lstm *l, qkv_tensor *xw,
                                       const qkv_lstm_state *s);
/* The whole sequence x [T,B,in] from s0 (NULL: zeros), as nn.LSTM runs
 * it: every step's x·W_x in one product, then the cell step by step.
 * Returns the last state (nil on failure); states, if not NULL, receives
 * each step's (T entries; on failure as qkv_rnn_forward's). */
qkv_lstm_state qkv_lstm_forward(qkv_tape *t, const qkv_lstm *l, qkv_tensor *x,
                                const qkv_lstm_state *s0, qkv_lstm_state *states);
/* Tokens in, as qkv_rnn_forward_ids: the table [V,in] projected once when
 * V < steps·batch. */
qkv_lstm_state qkv_lstm_forward_ids(qkv_tape *t, const qkv_lstm *l, qkv_tensor *table,
                                    const int *ids, int steps, int batch, const qkv_lstm_state *s0,
                                    qkv_lstm_state *states);

/* GRU: with a = x·W_x + b_x and u = h·W_h + b_h [B,3H], split into r, z, n:
 *   r = σ(a_r + u_r),  z = σ(a_z + u_z),  n = tanh(a_n + r∘u_n),
 *   h' = (1 - z)∘n + z∘h.
 * Parameters: PREFIX.wx [in,3H], PREFIX.wh [H,3H], PREFIX.bx [3H],
 * PREFIX.bh [3H]. */
typedef struct qkv_gru {
    qkv_tensor *wx, *wh, *bx, *bh;
    int in, hidden;
    char name[QKV_LAYER_NAME_BYTES]; /* the init's prefix, for messages */
} qkv_gru;

qkv_status qkv_gru_init(qkv_gru *g, qkv_params *p, const char *prefix, int in, int hidden,
                        qkv_error *err);
qkv_tensor *qkv_gru_cell(qkv_tape *t, const qkv_gru *g, qkv_tensor *x, qkv_tensor *h);
qkv_tensor *qkv_gru_cell_projected(qkv_tape *t, const qkv_gru *g, qkv_tensor *xw, qkv_tensor *h);
/* The whole sequence x [T,B,in] from h0 (NULL: zeros), as nn.GRU runs it:
 * every step's x·W_x in one product, then the cell step by step. Returns
 * the last state; states, if not NULL, receives each step's (on failure
 * as qkv_rnn_forward's). */
qkv_tensor *qkv_gru_forward(qkv_tape *t, const qkv_gru *g, qkv_tensor *x, qkv_tensor *h0,
                            qkv_tensor **states);
/* Tokens in, as qkv_rnn_forward_ids: the table [V,in] projected once when
 * V < steps·batch. */
qkv_tensor *qkv_gru_forward_ids(qkv_tape *t, const qkv_gru *g, qkv_tensor *table, const int *ids,
                                int steps, int batch, qkv_tensor *h0, qkv_tensor **states);

#ifdef __cplusplus
}
#endif
#endif
