/*
 * ablate.h - variants of the tutorial's attention layer, for the questions
 * it leaves open (§3.1, §3.2.1, §3.2.3): why V, why two matrices Q and K,
 * why e. Each variant is the coreference model with one thing changed:
 *
 *   full              S = (X·Wq)(X·Wk)ᵀ/√d_k, A = softmax(S), H = A·(X·Wv)
 *   no-v              H = A·X: the original (one-hot) vectors, d_v = d_model
 *   shared-qk         Wk = Wq, so S is symmetric
 *   shared-qk-noself  also masks each token's own position, as Reformer does
 *   bilinear          S = X·M·Xᵀ with one d_model × d_model matrix M
 *   base-2, base-10   A = softmax(ln b · S), that is b^S / Σ b^S
 *   base-2-matched,   the same, with Wq and Wk started at 1/√(ln b) of the
 *   base-10-matched   usual size and trained at 1/√(ln b) of the rate: the
 *                     substitution W → W/√(ln b) that turns base b back into
 *                     base e (exactly, for Adam, whose step does not depend
 *                     on the gradient's scale, but for its ε)
 *
 * X is one-hot, so X·W is a row gather. The pronoun's row of H goes
 * through Wo into cross-entropy, as in model.h. Wq, Wk, Wv start at N(0,
 * 0.1²) as in the tutorial, drawn in that order (full is the coreference
 * model, number for number); M at N(0, 0.01²), the spread of full's
 * scores at that start; Wo at N(0, 1/d_v).
 */
#ifndef QKV_COREF_ABLATE_H
#define QKV_COREF_ABLATE_H

#define QKV_ABLATE_E 2.718281828459045 /* the base of the full model, e */

#include <stdint.h>

#include "apps/coref/data.h"
#include "apps/coref/model.h"
#include "qkv/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qkv_ablate_kind {
    QKV_ABLATE_FULL,
    QKV_ABLATE_NO_V,
    QKV_ABLATE_SHARED_QK,
    QKV_ABLATE_SHARED_QK_NOSELF,
    QKV_ABLATE_BILINEAR,
    QKV_ABLATE_BASE
} qkv_ablate_kind;

typedef struct qkv_ablate_config {
    qkv_ablate_kind kind;
    int vocab, classes, d_k;
    double base; /* the softmax's base for QKV_ABLATE_BASE (e elsewhere) */
    int matched; /* base variants: Wq, Wk started (and, via
                  * qkv_ablate_lr_scale, trained) at 1/√(ln base) */
    uint64_t seed;
} qkv_ablate_config;

/* The variants by name, as `qkv ablate --variants` takes them: fills cfg's
 * kind, base and matched. 0, or -1 for an unknown name. */
int qkv_ablate_parse(const char *name, qkv_ablate_config *cfg);
extern const char *const qkv_ablate_names[];
#define QKV_ABLATE_VARIANTS 9

typedef struct qkv_ablate_model {
    qkv_ablate_config cfg;
    qkv_params *list;                  /* every parameter, in the order below */
    qkv_tensor *wq, *wk, *wv, *m, *wo; /* those the variant has; wk == wq when shared */
} qkv_ablate_model;

qkv_ablate_model *qkv_ablate_model_new(const qkv_ablate_config *cfg, qkv_error *err);
void qkv_ablate_model_free(qkv_ablate_model *m); /* accepts NULL */

/* The learning-rate factor of parameter i of the list (1 but for the
 * matched variants' Wq and Wk). */
double qkv_ablate_lr_scale(const qkv_ablate_model *m, int i);

/* Tape tensors of one forward pass: f as qkv_coref_forward gives it (the
 * scores are those the softmax sees, after the base's factor and before
 * the mask), and H = A·V [B,T,d_v]. */
typedef struct qkv_ablate_out {
    qkv_coref_out f;
    qkv_tensor *values;
} qkv_ablate_out;

/* Records the forward pass of b on t. Returns the tape status. */
qkv_status qkv_ablate_forward(qkv_ablate_model *m, qkv_tape *t, const qkv_coref_batch *b,
                              qkv_ablate_out *out);

/* One update: zero the gradients, forward, backward, step. QKV_ERR_NUMERIC
 * when the loss is not finite (no step is taken then). */
qkv_status qkv_ablate_train_step(qkv_ablate_model *m, qkv_optim *o, qkv_tape *t,
                                 const qkv_coref_batch *b, qkv_ablate_out *out);

/* Scores over n examples, without gradients, in chunks of b's capacity:
 * the mean loss, the accuracy, and the pronoun's attention weight on the
 * antecedent (the name it refers to) and on itself. */
typedef struct qkv_ablate_eval {
    double loss, acc, antecedent, self;
    int n;
} qkv_ablate_eval;

qkv_status qkv_ablate_evaluate(qkv_ablate_model *m, qkv_tape *t, qkv_coref_batch *b,
                               const qkv_coref_example *ex, int n, qkv_ablate_eval *out);

/* ---- the second task: two roles, two heads ----------------------------- */
/*
 * One-hot inputs make V redundant: H = A·X followed by Wo is A·X·(Wv·Wo)
 * with one matrix less. V earns its place when several heads share one
 * d_model-wide output, as in multi-head attention: each head's V writes
 * into its own d_model/H columns. This task needs that. Each sentence is
 * 「A喜欢B。」 with two different names; the model reads the last token (。)
 * and must name both the one who likes (A) and the one who is liked (B),
 * with two heads over embeddings plus learned positions (d_model 32):
 *
 *   full         head h: softmax(q_h·K_hᵀ/√16)·(X·Wv_h), 16 wide; concatenated: 32
 *   no-v         head h: softmax(...)·X, 32 wide; the heads added: 32
 *   no-v-concat  the same, concatenated: 64 wide (twice the width)
 *
 * then two linear read-outs (A's class, B's class) and the sum of their
 * cross-entropies. Without V the two heads' vectors land in the same 32
 * columns, and a sum cannot say which name was whose.
 */
typedef enum qkv_roles_kind {
    QKV_ROLES_FULL,
    QKV_ROLES_NO_V,
    QKV_ROLES_NO_V_CONCAT
} qkv_roles_kind;

int qkv_roles_parse(const char *name, qkv_roles_kind *kind); /* 0, or -1 */
extern const char *const qkv_roles_names[];
#define QKV_ROLES_VARIANTS 3
#define QKV_ROLES_T 4  /* 「A 喜欢 B 。」 */
#define QKV_ROLES_D 32 /* d_model */
#define QKV_ROLES_HEADS 2

/* A sentence of the task: ids[4], and the classes of A and B. pair is
 * 0 .. 131, the ordered pair of two different names. */
void qkv_roles_sentence(int pair, int *ids, int *cls_a, int *cls_b);
#define QKV_ROLES_PAIRS 132

/* The pairs 0 .. 131 in an order drawn from seed: the first
 * QKV_ROLES_HELD_OUT are held out for testing, the rest train. */
void qkv_roles_split(uint64_t seed, int *pairs);
#define QKV_ROLES_HELD_OUT 32

typedef struct qkv_roles_model {
    qkv_roles_kind kind;
    qkv_params *list;
    qkv_tensor *emb, *pos; /* (V,D) N(0,1), (T,D) N(0,1) */
    qkv_tensor *wq[QKV_ROLES_HEADS], *wk[QKV_ROLES_HEADS], *wv[QKV_ROLES_HEADS];
    qkv_tensor *read_a, *read_b; /* (width, classes) */
} qkv_roles_model;

qkv_roles_model *qkv_roles_model_new(qkv_roles_kind kind, uint64_t seed, qkv_error *err);
void qkv_roles_model_free(qkv_roles_model *m);

/* Forward on n sentences (pairs[0..n)); out_a, out_b get the logits
 * [n, classes]; returns the loss (mean over sentences of the two
 * cross-entropies added). */
qkv_tensor *qkv_roles_forward(qkv_roles_model *m, qkv_tape *t, const int *pairs, int n,
                              qkv_tensor **out_a, qkv_tensor **out_b);

/* One update on n sentences; the loss in *loss. QKV_ERR_NUMERIC when it is
 * not finite (no step is taken then). */
qkv_status qkv_roles_train_step(qkv_roles_model *m, qkv_optim *o, qkv_tape *t, const int *pairs,
                                int n, double *loss);

/* Over n sentences, without gradients: the share whose A, whose B, and
 * whose both names are right (any may be NULL). Returns the tape status. */
qkv_status qkv_roles_accuracy(qkv_roles_model *m, qkv_tape *t, const int *pairs, int n,
                              double *acc_a, double *acc_b, double *acc_both);

#ifdef __cplusplus
}
#endif
#endif
