/*
 * seq.h - the tutorial's RNN chapter on the coreference task: sentences
 * with k neutral filler tokens between a name and its pronoun, and models
 * that read them left to right (Elman RNN, LSTM, GRU) beside the attention
 * model, all answering at the pronoun's position.
 *
 * A distance sentence, k = 4:
 *
 *   小明 今天 跑步 ， 看书 ， 唱歌 ， 他 很 爱 画画
 *   name              [k fillers]     pronoun
 *
 * The name is at position 0 and the pronoun at k + 4: between them come
 * 今天 跑步 ， and the k fillers, pairs of "，" and an activity (看书, 唱歌,
 * 跳舞, 画画, 跑步), with 也 before 跑步 when k is odd (小明今天也跑步……).
 * Every sentence reads as Chinese and tokenizes back to its ids. The
 * pronoun follows its antecedent, so a left-to-right model can resolve it.
 */
#ifndef QKV_COREF_SEQ_H
#define QKV_COREF_SEQ_H

#include <stdint.h>

#include "apps/coref/model.h"
#include "qkv/layers.h"
#include "qkv/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QKV_DISTANCE_BASE 4 /* the pronoun's position at k = 0 */
#define QKV_DISTANCE_MAX 4096

/* One distance sentence of k fillers drawn with g: its ids (k + 8 of them;
 * room for that many in ids), the pronoun's position (k + 4) and the
 * antecedent's class. QKV_ERR_ARG for k out of [0, QKV_DISTANCE_MAX]. */
qkv_status qkv_distance_sentence(int k, qkv_rng *g, int *ids, int *len, int *pronoun, int *target,
                                 qkv_error *err);

/* Fills b with n distance sentences of k fillers (cleared first). */
qkv_status qkv_distance_batch(qkv_coref_batch *b, int n, int k, qkv_rng *g, qkv_error *err);

/* ---- the models --------------------------------------------------------- */

typedef enum qkv_seq_kind {
    QKV_SEQ_ATTENTION,
    QKV_SEQ_RNN,
    QKV_SEQ_LSTM,
    QKV_SEQ_GRU
} qkv_seq_kind;

const char *qkv_seq_name(qkv_seq_kind k);          /* "attention", "rnn", "lstm", "gru" */
int qkv_seq_parse(const char *s, qkv_seq_kind *k); /* 0, or -1 */

typedef struct qkv_seq_config {
    qkv_seq_kind kind;
    int vocab, classes;
    int width;       /* d_k for attention; the hidden size H for the others */
    qkv_rnn_act act; /* the Elman RNN's: tanh, or linear for `qkv bptt` */
    uint64_t seed;
    double forget_bias; /* the LSTM's forget-gate bias at init; NAN keeps PyTorch's
                         * U(±1/√H); 1 is the usual choice (Gers et al. 2000,
                         * Jozefowicz et al. 2015) */
} qkv_seq_config;

/* The LSTM's forget-gate bias that `qkv distance` and `qkv bptt` start from. */
#define QKV_SEQ_FORGET_BIAS 1.0

/* The widths that give the four models about the same number of
 * parameters on the coreference vocabulary (49 words, 12 classes):
 * attention d_k 16 (2,544), RNN H 28 (2,520), LSTM H 10 (2,520), GRU H 13
 * (2,652). */
int qkv_seq_default_width(qkv_seq_kind k);

/* The attention model is the coreference model (model.h: Wq, Wk, Wv from
 * N(0, 0.1²), scaled scores). The others: the one-hot input's projection is
 * a row of the cell's W_x; the state at the pronoun goes through Wo
 * [H, classes] ~ N(0, 1/H) into cross-entropy. */
typedef struct qkv_seq_model {
    qkv_seq_config cfg;
    qkv_params *list; /* every parameter (the attention model's own list) */
    qkv_coref_model *attn;
    qkv_rnn rnn;
    qkv_lstm lstm;
    qkv_gru gru;
    qkv_tensor *wo;
} qkv_seq_model;

qkv_seq_model *qkv_seq_model_new(const qkv_seq_config *cfg, qkv_error *err);
void qkv_seq_model_free(qkv_seq_model *m); /* accepts NULL */

/* The recurrent weight W_h of an RNN, LSTM or GRU model (NULL for
 * attention). */
qkv_tensor *qkv_seq_recurrent_weight(const qkv_seq_model *m);

/* Tape tensors of one forward pass. */
typedef struct qkv_seq_out {
    qkv_tensor *logits; /* (B, classes) */
    qkv_tensor *loss;   /* mean cross-entropy */
    qkv_tensor **h;     /* (T) the state after each step, [B,H] (RNN family; NULL for attention) */
    int steps;
} qkv_seq_out;

/* Records the forward pass of b on t. Returns the tape status. */
qkv_status qkv_seq_forward(qkv_seq_model *m, qkv_tape *t, const qkv_coref_batch *b,
                           qkv_seq_out *out);

/* Zero the gradients, reset the tape, forward, backward and an optimizer
 * step; QKV_ERR_NUMERIC (weights untouched) when the loss or a gradient is
 * not finite, or (weights updated, qkv_optim_step) when the update is not. */
qkv_status qkv_seq_train_step(qkv_seq_model *m, qkv_optim *o, qkv_tape *t, const qkv_coref_batch *b,
                              qkv_seq_out *out);

/* Items of b whose argmax logit is their target, without gradients;
 * resets the tape. -1 after a tape error. */
int qkv_seq_correct(qkv_seq_model *m, qkv_tape *t, const qkv_coref_batch *b);

#ifdef __cplusplus
}
#endif
#endif
