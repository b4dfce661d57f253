/*
 * gradcheck.h - compare the tape's gradients with central finite differences.
 *
 * A check evaluates a scalar loss of some parameters once while recording,
 * backpropagates, and then, for every parameter entry x, evaluates the loss
 * again at x+h and x-h without recording. The numerical derivative
 * (L(x+h) - L(x-h)) / 2h is compared with the tape's.
 */
#ifndef QKV_GRADCHECK_H
#define QKV_GRADCHECK_H

#include "qkv/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Builds a scalar loss on the tape from state held in ctx. It is called
 * many times and must compute the same function every time. */
typedef qkv_tensor *(*qkv_loss_fn)(qkv_tape *t, void *ctx);

typedef struct qkv_gradcheck_result {
    /* numeric: the estimate each entry was judged by (see qkv_gradcheck) */
    double max_abs; /* max |analytic - numeric| over all entries */
    double max_rel; /* max |analytic - numeric| / max(|a|, |n|, floor) */
    size_t checked; /* number of entries compared */
    int passed;     /* max_rel <= tolerance */
} qkv_gradcheck_result;

/* Default step, relative-error floor and tolerance for this build's scalar
 * type (see README "Gradient checks" for why these values). */
double qkv_gradcheck_default_step(void);
double qkv_gradcheck_default_floor(void);
double qkv_gradcheck_default_tol(void);

/* Runs the check on nparams parameters (heap tensors with gradients): one
 * central difference per entry in the float32 build, two (at step and
 * 2·step) extrapolated to cancel the h² error in the double build. An
 * entry that fails at step is measured again at step/3 and step/9. When
 * the three estimates move as a truncation error does (each difference
 * 3^order times smaller, order 2 in float32 and 4 in double), the entry
 * is judged by the last; otherwise by the first. That helps where the
 * loss curves sharply (a layer norm on rows of small spread); the choice
 * never looks at the analytic gradient, so rounding noise cannot make a
 * wrong gradient look right. The values are
 * restored afterwards, and so is the tape's gradient setting
 * (qkv_tape_set_grad); their gradients are left holding the analytic
 * gradient. step, floor and tol of 0 pick the defaults; each must be
 * finite and >= 0. It resets t first (what t held, an earlier error
 * included, is gone), and resets it when done. Returns the tape status if
 * the loss function fails, QKV_ERR_ARG on bad arguments (no parameters at
 * all among them: a check that compared nothing would read as passed),
 * with the reason in qkv_tape_error(t).
 *
 * The loss at x+h and x-h is evaluated with gradients off, and an op
 * that acts only while recording does nothing then: qkv_dropout is the
 * identity, so a loss with dropout at p > 0 fails the check (a relative
 * error near 2) however right its gradients are. Check such a model with
 * p = 0, or make fn draw the same mask at every call: a generator of its
 * own, seeded afresh at each call, with gradients switched on around
 * qkv_dropout (qkv_tape_set_grad), as the built-in "dropout" check does. */
qkv_status qkv_gradcheck(qkv_tape *t, qkv_loss_fn fn, void *ctx, qkv_tensor **params, int nparams,
                         double step, double floor, double tol, qkv_gradcheck_result *res);

/* Compares two gradient arrays entry by entry with the metric above and
 * folds the result into *res (which the caller zeroes first). A NULL res
 * does nothing; a NULL array with n > 0 compares nothing and fails *res
 * (max_abs and max_rel infinite, as a NaN entry makes them). */
void qkv_grad_compare(const qkv_real *analytic, const double *numeric, size_t n, double floor,
                      double tol, qkv_gradcheck_result *res);

/* The built-in checks: one per op plus the compositions attention uses.
 * qkv_gradcheck_builtin_count() says how many; qkv_gradcheck_builtin(i, ...)
 * runs check i on a fresh random input and fills *res. name receives a
 * pointer to the check's static name. */
int qkv_gradcheck_builtin_count(void);
qkv_status qkv_gradcheck_builtin(int i, const char **name, qkv_gradcheck_result *res);
/* The tolerance check i is judged at in this build: the default, or in
 * float32 a looser one for the layers, whose finite differences carry a
 * larger truncation error (src/layers/checks.c says how much). 0 for an i
 * out of range. */
double qkv_gradcheck_builtin_tol(int i);

#ifdef __cplusplus
}
#endif
#endif
