/*
 * quickstart.c - the smallest useful qkv program: record a loss on a tape,
 * backpropagate, read the gradients. The README quotes this file.
 *
 *   scores = q·Kᵀ / √d,  a = softmax(scores),  loss = cross_entropy(scores, 0)
 *
 * Every call that can fail is checked: constructors return nil or NULL
 * with the reason in a qkv_error, and ops leave theirs on the tape.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "qkv.h"

int main(int argc, char **argv)
{
    if (argc > 1) { /* it takes none: --help says what it does */
        const int help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0;
        if (!help) {
            char arg[256]; /* escaped: an argument cannot steer the terminal */
            qkv_escape(arg, sizeof arg, argv[1]);
            fprintf(stderr, "quickstart: unexpected argument '%s'\n", arg);
        }
        fprintf(help ? stdout : stderr,
                "usage: quickstart\n"
                "Records q·Kᵀ/√d, softmax and a cross-entropy loss on a tape, backpropagates\n"
                "and prints the attention, the loss and dL/dq. It takes no arguments.\n");
        return help ? 0 : 2;
    }
    qkv_error err = qkv_error_none();
    int rc = 1;
    /* parameters live outside the tape, with a gradient buffer */
    qkv_tensor *q = qkv_tensor_new(2, (const int[]){1, 2}, 1, &err); /* (1, d) */
    qkv_tensor *k = qkv_tensor_new(2, (const int[]){3, 2}, 1, &err); /* (T, d) */
    qkv_tape *tape = qkv_tape_new(0, &err);
    if (qkv_tensor_is_nil(q) || qkv_tensor_is_nil(k) || tape == NULL) {
        fprintf(stderr, "quickstart: %s\n", err.message);
        goto done;
    }
    const qkv_real qv[2] = {1, 0}, kv[6] = {1, 0, 0, 1, -1, 0};
    qkv_tensor_set(q, qv, 2);
    qkv_tensor_set(k, kv, 6);

    qkv_tensor *scores = qkv_scale(tape, qkv_matmul_nt(tape, q, k), 1 / sqrt(2.0));
    qkv_tensor *attn = qkv_softmax(tape, scores);
    const int target[1] = {0}; /* the query should attend to key 0 */
    qkv_tensor *loss = qkv_cross_entropy(tape, scores, target);
    if (qkv_backward(tape, loss) != QKV_OK) {
        fprintf(stderr, "quickstart: %s\n", qkv_tape_error(tape));
        goto done;
    }
    printf("attention: %.4f %.4f %.4f\n", attn->data[0], attn->data[1], attn->data[2]);
    printf("loss: %.4f\n", loss->data[0]);
    printf("dL/dq: %.4f %.4f\n", q->grad[0], q->grad[1]);
    rc = 0;
done:
    qkv_tape_free(tape);
    qkv_tensor_free(q);
    qkv_tensor_free(k);
    return rc;
}
