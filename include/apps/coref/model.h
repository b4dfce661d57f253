/*
 * model.h - the tutorial's self-attention layer as a coreference model:
 * weights that live outside the tape, a batch format, the forward pass, one
 * training step, and the attention metrics the experiments read.
 *
 *   ids (B,T) ─gather─► Q, K, V (B,T,d_k)        (one-hot X·W is a row gather)
 *   S = Q·Kᵀ [/√d_k] (B,T,T) ─+mask(padding)─► A = softmax(S)
 *   H = A·V (B,T,d_k) ─pick query row─► h (B,d_k) ─·Wo─► logits (B,C) ─► CE
 */
#ifndef QKV_COREF_MODEL_H
#define QKV_COREF_MODEL_H

#include <stdint.h>

#include "qkv/ops.h"
#include "qkv/optim.h"
#include "qkv/params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A batch of token sequences, each with one query position to classify. */
typedef struct qkv_coref_batch {
    int cap_b, cap_t; /* capacity: items, tokens per item */
    int B, T;         /* items now; longest length now */
    int *ids;         /* (cap_b, cap_t) token ids, 0 after each item's end */
    int *len;         /* (cap_b) tokens per item */
    int *query;       /* (cap_b) position whose output is classified (the pronoun) */
    int *target;      /* (cap_b) class of that position, or QKV_IGNORE */
    int *mark;        /* (cap_b) token id whose attention mass is measured, or -1 */
} qkv_coref_batch;

/* Allocates an empty batch for up to cap_b items of up to cap_t tokens.
 * Returns NULL with the reason in err when a capacity is < 1 or memory
 * runs out. */
qkv_coref_batch *qkv_coref_batch_new(int cap_b, int cap_t, qkv_error *err);
void qkv_coref_batch_free(qkv_coref_batch *b); /* accepts NULL */
void qkv_coref_batch_clear(qkv_coref_batch *b);

/* Appends one item (ids copied). QKV_ERR_ARG if the batch is full, len is
 * out of [1, cap_t] or query out of [0, len). */
qkv_status qkv_coref_batch_add(qkv_coref_batch *b, const int *ids, int len, int query, int target,
                               int mark);

#define QKV_COREF_MAX_DK 4096      /* the widest Q, K and V; every command uses this limit */
#define QKV_COREF_MAX_INIT_STD 100 /* the largest init_std; so does every command */

typedef struct qkv_coref_config {
    int vocab;       /* rows of Wq, Wk, Wv (d_model = vocabulary size) */
    int d_k;         /* columns of Wq, Wk, Wv: 1 .. QKV_COREF_MAX_DK */
    int classes;     /* columns of Wo */
    int scaled;      /* 1: divide scores by √d_k (the default); 0: don't */
    double init_std; /* Wq, Wk, Wv ~ N(0, init_std²), 0 .. QKV_COREF_MAX_INIT_STD;
                      * the tutorial uses 0.1 */
    uint64_t seed;   /* weights are drawn with qkv_rng seeded by this */
} qkv_coref_config;

#define QKV_COREF_PARAMS 4

typedef struct qkv_coref_model {
    qkv_coref_config cfg;
    unsigned levels;                      /* the task levels it was trained on, as a bit set for
                      * qkv_coref_data_build; 0: not recorded (all) */
    qkv_params *list;                     /* owns the four tensors: "wq", "wk", "wv", "wo" */
    qkv_tensor *wq, *wk, *wv;             /* (vocab, d_k) */
    qkv_tensor *wo;                       /* (d_k, classes), ~ N(0, 1/d_k) */
    qkv_tensor *params[QKV_COREF_PARAMS]; /* wq, wk, wv, wo */
    /* 0 (as made): forward passes make the scores and weights of every
     * row, for the statistics and the heat maps. Nonzero: only the
     * pronoun's row, which is all that the loss and its gradients read,
     * in O(T·d_k) per sentence instead of O(T²·d_k) (qkv_embed_attention_rows
     * without parts); the out's scores and attn are then NULL. The
     * logits, the loss and every gradient are the same, bit for bit. */
    int rows_only;
} qkv_coref_model;

/* qkv_coref_model_new(const qkv_coref_config *cfg, qkv_error *err) makes a
 * model with random weights: Wq, Wk, Wv row by row in that order from
 * N(0, init_std²) (as the tutorial's demo draws them), then Wo from
 * N(0, 1/d_k) so logits start near unit scale whatever d_k is. Returns NULL
 * with the reason in err for an invalid config (QKV_ERR_ARG), when memory
 * runs out, or when the program's scalar type differs from the library's
 * (QKV_ERR_ABI). A macro: it passes QKV_ABI. */
qkv_coref_model *qkv_coref_model_new_abi(unsigned abi, const qkv_coref_config *cfg, qkv_error *err);
#define qkv_coref_model_new(...) qkv_coref_model_new_abi(QKV_ABI, __VA_ARGS__)
void qkv_coref_model_free(qkv_coref_model *m); /* accepts NULL */

/* A model of this config with every weight zero, for a loader to fill.
 * NULL with the reason in err, as qkv_coref_model_new. */
qkv_coref_model *qkv_coref_model_alloc(const qkv_coref_config *cfg, qkv_error *err);

/* Tape tensors of one forward pass, valid until the tape is reset. */
typedef struct qkv_coref_out {
    qkv_tensor *scores; /* (B,T,T) Q·Kᵀ, scaled if the model scales; before the
                         * mask (NULL when the model's rows_only is set) */
    qkv_tensor *attn;   /* (B,T,T) softmax rows; padded keys get 0 (NULL likewise) */
    qkv_tensor *logits; /* (B,classes) */
    qkv_tensor *loss;   /* scalar mean cross-entropy */
} qkv_coref_out;

/* Records the forward pass of batch b on tape t. Returns the tape status
 * (the message is in qkv_tape_error). */
qkv_status qkv_coref_forward(qkv_coref_model *m, qkv_tape *t, const qkv_coref_batch *b,
                             qkv_coref_out *f);

/* One optimisation step: zero the gradients, reset the tape, forward,
 * backward, optimizer step. f is left holding the forward tensors (with
 * their gradients). A loss or gradient that is not finite stops before the
 * update with QKV_ERR_NUMERIC and leaves the weights untouched; an update
 * that is not finite is QKV_ERR_NUMERIC too, after it (qkv_optim_step). */
qkv_status qkv_coref_train_step(qkv_coref_model *m, qkv_optim *o, qkv_tape *t,
                                const qkv_coref_batch *b, qkv_coref_out *f);

/* Attention metrics of one forward pass, averaged over the valid query rows
 * (i < len) of every item unless noted. A forward pass without scores and
 * weights (rows_only) gives the loss, correct and items alone; the rest
 * are 0. */
typedef struct qkv_coref_stats {
    double loss; /* the batch loss */
    int correct; /* items whose argmax logit is the target */
    int items;
    double entropy;    /* mean -Σ a log a of the attention rows */
    double max_weight; /* mean of each row's largest weight */
    double jacobian;   /* mean Frobenius norm of diag(a) - a·aᵀ */
    double score_var;  /* variance of the scores over valid (i,j) pairs */
    double mark_mass;  /* mean weight of the query row on the marked token(s) */
} qkv_coref_stats;

void qkv_coref_stats_of(const qkv_coref_out *f, const qkv_coref_batch *b, qkv_coref_stats *s);

/* The argmax class of item i, and its softmax probability in *p (which may
 * be NULL). */
int qkv_coref_predict(const qkv_coref_out *f, int i, double *p);

/* Shannon entropy -Σ p log p (natural log) of a probability row; terms with
 * p = 0 contribute 0. */
double qkv_coref_entropy(const qkv_real *p, size_t n);

/* Frobenius norm of the softmax Jacobian J = diag(a) - a·aᵀ for the
 * probability row a: sqrt(Σ_i a_i²(1-a_i)² + Σ_{i≠j} a_i²a_j²). */
double qkv_coref_jacobian_norm(const qkv_real *a, size_t n);

#ifdef __cplusplus
}
#endif
#endif
