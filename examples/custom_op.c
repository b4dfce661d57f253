/*
 * custom_op.c - an op of your own, written the way the library writes its
 * ops: check the inputs, make the output on the tape, compute it, record a
 * node whose definition carries the backward pass. Then check its gradient
 * against finite differences and train with it.
 *
 * The op is a "soft sign", y = x / (1 + |x|), whose derivative is
 * dy/dx = 1 / (1 + |x|)².
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "qkv.h"

/* dx += dy / (1 + |x|)² */
static void softsign_backward(const qkv_node *n)
{
    qkv_tensor *x = n->in[0];
    for (size_t i = 0; i < x->numel; i++) {
        qkv_real d = 1 + fabs((double)x->data[i]);
        x->grad[i] += n->out->grad[i] / (d * d);
    }
}

static const qkv_op_def softsign_op = {"softsign", softsign_backward, 0};

static qkv_tensor *softsign(qkv_tape *t, qkv_tensor *x)
{
    if (qkv_tape_status(t) != QKV_OK)
        return qkv_nil();
    if (qkv_tensor_is_nil(x)) {
        qkv_tape_fail(t, QKV_ERR_ARG, "softsign: input is nil");
        return qkv_nil();
    }
    qkv_tensor *y = qkv_tape_tensor(t, x->ndim, x->shape, x->grad != NULL);
    if (qkv_tensor_is_nil(y))
        return y;
    for (size_t i = 0; i < x->numel; i++)
        y->data[i] = x->data[i] / (1 + fabs((double)x->data[i]));
    if (y->grad != NULL && qkv_tape_record(t, &softsign_op, y, 1, &x) == NULL)
        return qkv_nil();
    return y;
}

/* loss = mean((softsign(w) - target)²), for the gradient check */
static qkv_tensor *loss_of(qkv_tape *t, void *ctx)
{
    qkv_tensor **p = ctx; /* p[0] = w, p[1] = target */
    qkv_tensor *diff = qkv_add(t, softsign(t, p[0]), qkv_scale(t, p[1], -1));
    return qkv_mean(t, qkv_mul(t, diff, diff));
}

int main(int argc, char **argv)
{
    if (argc > 1) { /* it takes none: --help says what it does */
        const int help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0;
        if (!help) {
            char arg[256]; /* escaped: an argument cannot steer the terminal */
            qkv_escape(arg, sizeof arg, argv[1]);
            fprintf(stderr, "custom_op: unexpected argument '%s'\n", arg);
        }
        fprintf(help ? stdout : stderr,
                "usage: custom_op\n"
                "Defines an op of its own, a soft sign, checks its gradient against finite\n"
                "differences and trains through it. It takes no arguments.\n");
        return help ? 0 : 2;
    }
    qkv_error err = qkv_error_none();
    int rc = 1;
    qkv_tensor *w = qkv_tensor_new(1, (const int[]){4}, 1, &err);
    qkv_tensor *target = qkv_tensor_new(1, (const int[]){4}, 0, &err);
    qkv_tape *t = qkv_tape_new(0, &err);
    qkv_optim_config oc = qkv_optim_defaults(QKV_SGD);
    oc.lr = 2;
    qkv_optim *opt = t ? qkv_optim_new(&oc, &w, 1, &err) : NULL;
    if (opt == NULL || qkv_tensor_is_nil(w) || qkv_tensor_is_nil(target)) {
        fprintf(stderr, "custom_op: %s\n", err.message);
        goto done;
    }
    const qkv_real w0[4] = {-2, -0.5, 0.25, 3}, y[4] = {0.5, -0.25, 0.1, -0.6};
    qkv_tensor_set(w, w0, 4);
    qkv_tensor_set(target, y, 4);
    qkv_tensor *ctx[2] = {w, target};

    /* the backward pass against central finite differences */
    qkv_gradcheck_result gc;
    if (qkv_gradcheck(t, loss_of, ctx, &w, 1, 0, 0, 0, &gc) != QKV_OK) {
        fprintf(stderr, "custom_op: %s\n", qkv_tape_error(t));
        goto done;
    }
    printf("gradient check: max relative error %.2e (%s)\n", gc.max_rel,
           gc.passed ? "pass" : "FAIL");

    /* and training through it: softsign(w) moves to the target */
    double loss = 0;
    for (int step = 0; step < 500; step++) {
        qkv_optim_zero_grad(opt);
        qkv_tape_reset(t);
        qkv_tensor *l = loss_of(t, ctx);
        if (qkv_backward(t, l) != QKV_OK || qkv_optim_step(opt) != QKV_OK) {
            /* the tape's reason, else the optimizer's (a gradient or update not finite) */
            fprintf(stderr, "custom_op: step %d: %s\n", step,
                    qkv_tape_status(t) != QKV_OK ? qkv_tape_error(t) : qkv_optim_error(opt));
            goto done;
        }
        loss = l->data[0];
    }
    printf("after 500 SGD steps: loss %.2e\n", loss);
    rc = gc.passed && loss < 1e-6 ? 0 : 1;
done:
    qkv_optim_free(opt);
    qkv_tape_free(t);
    qkv_tensor_free(w);
    qkv_tensor_free(target);
    return rc;
}
