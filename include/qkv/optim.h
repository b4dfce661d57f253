/*
 * optim.h - optimizers over heap tensors with gradients: SGD with momentum,
 * Adam, AdamW, and clipping by global norm.
 *
 * An optimizer keeps its state (velocities, moments) for a fixed list of
 * parameters; it allocates everything in qkv_optim_new and nothing per step.
 * qkv_optim_save and qkv_optim_load keep that state in a safetensors file,
 * so that a run can stop and resume exactly.
 */
#ifndef QKV_OPTIM_H
#define QKV_OPTIM_H

#include "qkv/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qkv_optim_kind { QKV_SGD, QKV_ADAM, QKV_ADAMW } qkv_optim_kind;

typedef struct qkv_optim_config {
    qkv_optim_kind kind;
    double lr;           /* finite, >= 0 (0 moves nothing, as in PyTorch) */
    double momentum;     /* SGD: v = μ·v + g; p -= lr·v (0 = plain SGD) */
    double beta1, beta2; /* Adam(W) moment decay, e.g. 0.9 and 0.999 */
    double eps;          /* Adam(W) denominator guard, > 0, e.g. 1e-8 */
    double weight_decay; /* SGD/Adam: g += wd·p; AdamW: p -= lr·wd·p (decoupled) */
    double clip;         /* clip the global gradient norm to this; 0 = off */
} qkv_optim_config;

typedef struct qkv_optim qkv_optim;

/* A config with the usual defaults for kind: lr 0.1 (SGD) or 0.01 (Adam,
 * AdamW), momentum 0, betas 0.9/0.999, eps 1e-8, weight decay 0 (0.01 for
 * AdamW), no clipping. */
qkv_optim_config qkv_optim_defaults(qkv_optim_kind kind);

/* Makes an optimizer for n parameters (not owned; they must outlive it;
 * each needs a gradient buffer, and may be listed once). n must be at
 * least 1: an optimizer over no parameters would step nothing, and is
 * refused (as PyTorch refuses an empty parameter list). Returns NULL with
 * the reason in err for a bad config (a negative rate, an eps, decay or
 * clip below 0, any of them not finite, an eps of 0 for Adam or AdamW, a
 * momentum or beta outside [0, 1)), for n below 1 or params NULL, or for
 * a parameter that is nil, has no gradient, was made on a tape (or is a
 * view made there) or is listed twice (all QKV_ERR_ARG), or when memory
 * runs out (QKV_ERR_NOMEM). */
qkv_optim *qkv_optim_new(const qkv_optim_config *cfg, qkv_tensor **params, int n, qkv_error *err);
void qkv_optim_free(qkv_optim *o); /* accepts NULL */

/* Sets every parameter's gradient to zero. */
void qkv_optim_zero_grad(qkv_optim *o);

/* Clips (if configured: the gradients are scaled in place, as
 * qkv_clip_grad_norm scales them, and stay scaled after the step) and
 * applies one update. Returns QKV_ERR_NUMERIC and
 * changes nothing (weights, moments, step count) if some gradient is NaN
 * or infinite, or if the sum of their squares is (in the double build,
 * gradients of about 1e154 and more: their global norm does not fit a
 * double); qkv_optim_error then says which parameter (by its name, see
 * qkv_optim_set_name, or else its index) and which value.
 *
 * QKV_ERR_NUMERIC too when the gradients are finite but the update is not:
 * a weight it leaves is NaN or infinite (SGD at lr 1e38 in the float
 * build: w - 1e38·g is beyond FLT_MAX for |g| > 3.4), or an Adam second
 * moment is (a weight decay so large that g·g overflows). That is seen
 * as the update is written, not in a pass before it (a step reads its
 * memory once), so the step has been taken whole: every parameter holds
 * its update, the non-finite values among them, the moments hold theirs
 * and the step count has moved on. The weights are then fit for nothing
 * but a message: a caller that means to go on keeps a copy (a checkpoint)
 * from before. qkv_optim_error names the first such parameter and its
 * first value that is not finite. QKV_ERR_ARG for a NULL optimizer. */
qkv_status qkv_optim_step(qkv_optim *o);

/* Why the last qkv_optim_step failed, one line, e.g. "optim: the gradient
 * of block0.b is not finite: grad[0] = infinity; no parameter was changed" or
 * "optim: the update of wq is not finite: data[3] = -infinity, from finite
 * gradients; every parameter was updated"; ""
 * before the first step and after one that succeeded. Owned by o, valid
 * until its next step. Never NULL: a NULL o gives a message saying so. */
const char *qkv_optim_error(const qkv_optim *o);

/* Names parameter i (in the order given to qkv_optim_new) in the messages
 * of qkv_optim_error, which otherwise say "parameter i". The optimizer
 * keeps a copy of name; NULL goes back to the index. qkv_params_optim
 * names each parameter as its list does. QKV_ERR_ARG (and no change) for
 * an index out of range, QKV_ERR_NOMEM when the copy cannot be made. */
qkv_status qkv_optim_set_name(qkv_optim *o, int i, const char *name);

/* The global gradient norm before the last step's clipping. */
double qkv_optim_last_norm(const qkv_optim *o);

/* sqrt(Σ g²) over all gradients of the n parameters (accumulated in double). */
double qkv_grad_norm(qkv_tensor *const *params, int n);

/* Scales all gradients by max_norm / norm when their global norm exceeds
 * max_norm (PyTorch's clip_grad_norm_ scales by max_norm / (norm + 1e-6),
 * so its clipped gradients are smaller by a relative 1e-6/norm: (3, 4),
 * of norm 5, clipped to 1 gives 0.6 for the 3 here, 0.59999988 there); a max_norm of 0 or
 * below (or NaN) means no clipping, as the config's clip of 0 does
 * (PyTorch's clip_grad_norm_ would zero them). The optimizer's clip does
 * the same. A norm that is not finite: infinity scales every gradient by
 * 0, so an infinite one becomes NaN (as in PyTorch); NaN leaves the
 * gradients as they are (PyTorch makes them all NaN); the norm returned
 * shows either. qkv_optim_step clips none of this: it refuses such a
 * norm, leaving the gradients as they are. Returns the norm before
 * clipping. */
double qkv_clip_grad_norm(qkv_tensor *const *params, int n, double max_norm);

/* The learning rate in use, and a new one (for a schedule, between steps).
 * QKV_ERR_ARG for a negative or non-finite rate. */
double qkv_optim_lr(const qkv_optim *o);
qkv_status qkv_optim_set_lr(qkv_optim *o, double lr);

/* Parameter i's learning rate becomes lr·scale (1 by default), as a
 * PyTorch parameter group with its own rate: a schedule's qkv_optim_set_lr
 * moves every rate together. QKV_ERR_ARG for an index out of range or a
 * negative or non-finite scale. */
qkv_status qkv_optim_set_lr_scale(qkv_optim *o, int i, double scale);

/* Whether parameter i (in the order given to qkv_optim_new) gets weight
 * decay; every parameter does unless switched off here. QKV_ERR_ARG (and
 * no change) for an index out of range. */
qkv_status qkv_optim_set_decay(qkv_optim *o, int i, int on);

/* Steps taken, and the state kept for parameter i: which = 0 the first
 * moment (SGD: the velocity), which = 1 the second moment (NULL for SGD);
 * *n (may be NULL) gets the count. NULL for an index out of range. For
 * tests and inspection; do not write through it. */
long qkv_optim_steps(const qkv_optim *o);
const double *qkv_optim_state(const qkv_optim *o, int i, int which, size_t *n);

/* Saving and loading the state, so that a run stopped after k steps and
 * resumed (the weights with qkv_safetensors_save and _load, this with
 * qkv_optim_save and _load, into a new optimizer over the same parameters
 * made with the same config) takes the same steps, to the bit, as one
 * that never stopped; as PyTorch's optimizer.state_dict() does.
 *
 * The file is safetensors (safetensors.h), written atomically with the CRC
 * of qkv's weights. Its tensors, F64 in either build (the moments are
 * double, so they come back exact), are each parameter's state under its
 * name (qkv_optim_set_name; qkv_params_optim gives the list's names) or,
 * for one without a name, its index: NAME.momentum_buffer for SGD,
 * NAME.exp_avg and NAME.exp_avg_sq for Adam and AdamW (PyTorch's names),
 * with the parameter's shape; and qkv_optim.decay and qkv_optim.lr_scale,
 * [n], each parameter's weight decay switch (0 or 1) and rate scale. Its
 * metadata holds the kind (qkv_optim: "sgd", "adam", "adamw"), the step
 * count (qkv_optim_steps), the learning rate in use and the last norm, and
 * the config's momentum, betas, eps, weight decay and clip (as %.17g,
 * which reads back exact). The weights themselves are not in it.
 *
 * qkv_optim_save: QKV_ERR_NUMERIC (and the file left as it was) when some
 * state is not finite (a failed step made it so); QKV_ERR_ARG for a NULL
 * o or path, or for names that cannot make a file (two parameters with
 * one name, a name too long or not UTF-8); QKV_ERR_IO as
 * qkv_safetensors_save.
 *
 * qkv_optim_load reads path into o and changes nothing unless all of it
 * fits; it refuses, with a one-line message naming the file and what
 * differs: a file that is not a safetensors file, is damaged (the CRC),
 * or holds no optimizer state (QKV_ERR_FORMAT, QKV_ERR_IO when it cannot
 * be read); the state of another kind, of another number of parameters,
 * or a parameter missing from it, a state tensor that is not F64, or an
 * Adam second moment below 0 (QKV_ERR_FORMAT; QKV_ERR_NUMERIC for a
 * state value that is not finite); a parameter whose
 * shape differs (QKV_ERR_SHAPE); a momentum, beta, eps, weight decay or
 * clip that differs from o's by a bit, or a parameter whose decay switch
 * or rate scale does (QKV_ERR_ARG). Those are set once, when a run is
 * set up, and a resume that changed one would take other steps without a
 * word. The learning rate is not checked but restored, as PyTorch's
 * load_state_dict restores it: a schedule changes it between steps (call
 * it with qkv_optim_steps, which the load restores too), and a caller who
 * means to change it sets it after the load. QKV_ERR_ARG for a NULL o or
 * path. */
qkv_status qkv_optim_save(const qkv_optim *o, const char *path, qkv_error *err);
qkv_status qkv_optim_load(qkv_optim *o, const char *path, qkv_error *err);

/* The learning rate at step (0-based) of a linear warm-up over warmup
 * steps, from lr_max/warmup up to lr_max, followed by a cosine decay to
 * lr_min at step total: lr_min + (lr_max - lr_min)·(1 + cos(π·p))/2 with
 * p = (step - warmup)/(total - warmup); lr_min from total on, even when
 * the warm-up is longer than total. A step below 0 counts as step 0, a
 * warm-up below 0 as none. */
double qkv_lr_warmup_cosine(long step, long warmup, long total, double lr_max, double lr_min);

/* Parses "sgd", "adam" or "adamw"; returns 0 and sets *kind, or -1. */
int qkv_optim_parse(const char *name, qkv_optim_kind *kind);

/* The name qkv_optim_parse reads, or "unknown" for another value. */
const char *qkv_optim_name(qkv_optim_kind kind);

#ifdef __cplusplus
}
#endif
#endif
