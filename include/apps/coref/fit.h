/*
 * fit.h - training and evaluating the coreference model: the one loop that
 * `qkv train`, `qkv saturation` and the experiments share, the batches it
 * draws, and evaluation over a split.
 */
#ifndef QKV_COREF_FIT_H
#define QKV_COREF_FIT_H

#include <stdint.h>

#include "apps/coref/data.h"
#include "apps/coref/model.h"
#include "qkv/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Appends an example to the batch: the pronoun is the query, the
 * antecedent's class the target and its token the mark. */
qkv_status qkv_coref_batch_add_example(qkv_coref_batch *b, const qkv_coref_example *ex);

/* Fills b with the next items of ex in the order order[0..n), which g
 * reshuffles at the start of every epoch (when *pos is 0); the batches
 * qkv_coref_fit trains on. */
void qkv_coref_draw_batch(qkv_rng *g, qkv_coref_batch *b, const qkv_coref_example *ex, int *order,
                          int n, int *pos);

/* Accuracy, loss and attention mass on the antecedent over examples. */
typedef struct qkv_coref_eval {
    double loss, acc, mass;
    int n; /* examples counted */
} qkv_coref_eval;

/* Evaluates m on n examples (level 0 = all, else only that level) without
 * recording gradients, in chunks of the batch's capacity; resets the tape.
 * Returns the tape status. */
qkv_status qkv_coref_evaluate(qkv_coref_model *m, qkv_tape *t, qkv_coref_batch *b,
                              const qkv_coref_example *ex, int n, int level, qkv_coref_eval *out);

/* One step of qkv_coref_fit, as its hook sees it. */
typedef struct qkv_coref_step {
    int step;                     /* updates done so far, 1 .. steps */
    const qkv_coref_batch *batch; /* the batch of this update */
    const qkv_coref_out *out;     /* its forward tensors, with their gradients
                                   * (of the weights before the update) */
} qkv_coref_step;

/* Called after every update; a status other than QKV_OK stops the loop and
 * is returned. The tape may be used (and reset) inside. */
typedef qkv_status (*qkv_coref_hook)(void *ctx, const qkv_coref_step *s);

/* Why o refused the step whose loss was `loss`, as qkv_optim_error says
 * it without its "optim: " (e.g. "the gradient of wq is not finite:
 * grad[3] = infinity; no parameter was changed"), for a training step that
 * returned QKV_ERR_NUMERIC; "" when the optimizer did not refuse it: the
 * loss was not finite, which stops the step before the optimizer (whose
 * message is then an older step's), or o is NULL. */
const char *qkv_coref_refusal(const qkv_optim *o, double loss);

/* Says in err that a training step (qkv_coref_train_step,
 * qkv_seq_train_step) which returned QKV_ERR_NUMERIC diverged: "diverged
 * at step N: " and why, the optimizer's account of the gradient or the
 * update it refused (qkv_coref_refusal of o and the step's loss), or "the
 * loss or a gradient is not finite" when it refused none. The one wording
 * of qkv_coref_fit and of the experiments' own loops. err may be NULL.
 * Returns QKV_ERR_NUMERIC, the status it sets. */
qkv_status qkv_coref_diverged(qkv_error *err, int step, const qkv_optim *o, double loss);

/* Trains m for `steps` updates on batches from the training split: items in
 * an order that a qkv_rng seeded by batch_seed reshuffles at the start of
 * every epoch (the first batch starts an epoch). hook (may be NULL) runs
 * after each update. Returns QKV_OK; or QKV_ERR_NUMERIC when a loss or
 * gradient stops being finite (the weights keep their last finite values,
 * and *done says how many updates were made) or an update does (the
 * optimizer has applied it, qkv_optim_step: the weights hold values that
 * are not finite, and *done does not count it), with "diverged at step N"
 * in err, followed by qkv_optim_error's account of the gradient or the
 * update when the optimizer refused the step; or the error of a step or
 * the hook. */
qkv_status qkv_coref_fit(qkv_coref_model *m, qkv_optim *o, qkv_tape *t, qkv_coref_batch *batch,
                         const qkv_coref_data *d, int steps, uint64_t batch_seed,
                         qkv_coref_hook hook, void *ctx, int *done, qkv_error *err);

#ifdef __cplusplus
}
#endif
#endif
