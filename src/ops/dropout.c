/*
 * dropout.c - inverted dropout, forward and backward: each value is kept
 * with probability 1 - p and scaled by 1/(1 - p), or zeroed, so the
 * expected output is the input; at p = 0 or with gradients off (evaluation)
 * it is the identity.
 */
#include "ops/op.h"
#include "qkv/rng.h"

static void dropout_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    const qkv_real *m = nd->saved, *dy = nd->out->grad;
    for (size_t i = 0; i < x->numel; i++) /* dx = dy·m, m = 0 or 1/(1-p) */
        x->grad[i] += dy[i] * m[i];
}

static const qkv_op_def op_dropout = {"dropout", dropout_backward, 0};

qkv_tensor *qkv_dropout(qkv_tape *t, qkv_tensor *x, double p, qkv_rng *rng)
{
    if (!qkv_op_inputs_ok(t, "dropout", x, NULL, 0))
        return qkv_nil();
    if (!(p >= 0 && p < 1)) {
        char num[32];
        qkv_tape_fail(t, QKV_ERR_ARG, "dropout: p = %s must be in [0, 1)",
                      qkv_num_str(num, sizeof num, p));
        return qkv_nil();
    }
    if (rng == NULL) { /* even where no value is drawn: at p = 0, or evaluating */
        qkv_tape_fail(t, QKV_ERR_ARG, "dropout: no generator (rng is NULL)");
        return qkv_nil();
    }
    if (p == 0 || !qkv_tape_grad_enabled(t))
        return x;
    qkv_tensor *out = qkv_op_out(t, "dropout", x->ndim, x->shape, x, NULL);
    qkv_real *m = qkv_op_alloc(t, "dropout", x->numel * sizeof *m);
    if (qkv_tensor_is_nil(out) || m == NULL)
        return qkv_nil();
    const qkv_real keep = (qkv_real)(1 / (1 - p));
    for (size_t i = 0; i < x->numel; i++) { /* one draw per value, in order */
        m[i] = qkv_rng_random(rng) < p ? 0 : keep;
        out->data[i] = x->data[i] * m[i];
    }
    int failed;
    qkv_node *n = qkv_op_record(t, &op_dropout, out, x, NULL, &failed);
    if (n != NULL)
        n->saved = m;
    return failed ? qkv_nil() : out;
}
