/*
 * xor_mlp.c - a two-layer perceptron learns XOR, the classic problem no
 * single linear layer can solve: x (4×2) -> tanh(x·W1 + b1) (4×8) -> ·W2 + b2
 * (4×1) -> binary cross-entropy on the logits, trained with Adam.
 *
 * It prints the four predictions, the final loss, and how many heap
 * allocations the training steps after the first made (0: the tape reuses
 * its memory).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "qkv.h"

enum { HIDDEN = 8, STEPS = 400 };

/* w ~ N(0, 1/fan_in) from the library's generator. */
static void init(qkv_tensor *w, qkv_rng *g, int fan_in)
{
    for (size_t i = 0; i < w->numel; i++)
        w->data[i] = (qkv_real)qkv_rng_normalvariate(g, 0, 1 / sqrt((double)fan_in));
}

int main(int argc, char **argv)
{
    if (argc > 1) { /* it takes none: --help says what it does */
        const int help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0;
        if (!help) {
            char arg[256]; /* escaped: an argument cannot steer the terminal */
            qkv_escape(arg, sizeof arg, argv[1]);
            fprintf(stderr, "xor_mlp: unexpected argument '%s'\n", arg);
        }
        fprintf(help ? stdout : stderr,
                "usage: xor_mlp\n"
                "Trains a two-layer perceptron on XOR with Adam and prints its four\n"
                "predictions. It takes no arguments.\n");
        return help ? 0 : 2;
    }
    qkv_error err = qkv_error_none();
    int rc = 1;
    qkv_tensor *x = qkv_tensor_new(2, (const int[]){4, 2}, 0, &err);
    qkv_tensor *y = qkv_tensor_new(2, (const int[]){4, 1}, 0, &err);
    qkv_tensor *w1 = qkv_tensor_new(2, (const int[]){2, HIDDEN}, 1, &err);
    qkv_tensor *b1 = qkv_tensor_new(1, (const int[]){HIDDEN}, 1, &err);
    qkv_tensor *w2 = qkv_tensor_new(2, (const int[]){HIDDEN, 1}, 1, &err);
    qkv_tensor *b2 = qkv_tensor_new(1, (const int[]){1}, 1, &err);
    qkv_tensor *params[4] = {w1, b1, w2, b2};
    qkv_tape *t = qkv_tape_new(0, &err);
    qkv_optim_config oc = qkv_optim_defaults(QKV_ADAM);
    oc.lr = 0.05;
    qkv_optim *opt = t != NULL && err.status == QKV_OK ? qkv_optim_new(&oc, params, 4, &err) : NULL;
    if (opt == NULL) {
        fprintf(stderr, "xor_mlp: %s\n", err.message);
        goto done;
    }
    const qkv_real xv[8] = {0, 0, 0, 1, 1, 0, 1, 1}, yv[4] = {0, 1, 1, 0};
    qkv_tensor_set(x, xv, 8);
    qkv_tensor_set(y, yv, 4);
    qkv_rng g;
    qkv_rng_seed(&g, 3);
    init(w1, &g, 2);
    init(w2, &g, HIDDEN);

    qkv_tensor *logits = NULL, *loss = NULL;
    size_t allocs = 0;
    for (int step = 1; step <= STEPS; step++) {
        if (step == 2)
            allocs = qkv_alloc_count();
        qkv_optim_zero_grad(opt);
        qkv_tape_reset(t);
        qkv_tensor *h = qkv_tanh(t, qkv_add(t, qkv_matmul(t, x, w1), b1)); /* (4, HIDDEN) */
        logits = qkv_add(t, qkv_matmul(t, h, w2), b2);                     /* (4, 1) */
        loss = qkv_bce_with_logits(t, logits, y);
        if (qkv_backward(t, loss) != QKV_OK || qkv_optim_step(opt) != QKV_OK) {
            /* the tape's reason, else the optimizer's (a gradient or update not finite) */
            fprintf(stderr, "xor_mlp: step %d: %s\n", step,
                    qkv_tape_status(t) != QKV_OK ? qkv_tape_error(t) : qkv_optim_error(opt));
            goto done;
        }
    }
    allocs = qkv_alloc_count() - allocs;
    int correct = 0;
    for (int i = 0; i < 4; i++) {
        double p = 1 / (1 + exp(-(double)logits->data[i]));
        correct += (p > 0.5) == (yv[i] > 0.5);
        printf("%g xor %g = %g: p = %.4f\n", (double)xv[2 * i], (double)xv[2 * i + 1],
               (double)yv[i], p);
    }
    printf("loss %.5f, %d of 4 correct\n", (double)loss->data[0], correct);
    printf("heap allocations in steps 2 to %d: %zu\n", STEPS, allocs);
    rc = correct == 4 && loss->data[0] < 0.05 && allocs == 0 ? 0 : 1;
done:
    qkv_optim_free(opt);
    qkv_tape_free(t);
    for (int i = 0; i < 4; i++)
        qkv_tensor_free(params[i]);
    qkv_tensor_free(x);
    qkv_tensor_free(y);
    return rc;
}
