/*
 * padding.c - a batch of sequences of different lengths, padded to one
 * length, through multi-head attention with a padding mask.
 *
 * Each sequence is a marker token, then 1 to L - 1 digits (1-9), then
 * padding up to L tokens:
 *
 *   [CLS] 3 8 5 [PAD] [PAD] [PAD] [PAD]      label: 5 is odd -> 1
 *
 * The label is the parity of the last digit. The model embeds the tokens,
 * adds learned positions, runs one attention layer and reads the marker's
 * output with a linear classifier. To answer, the marker must find the
 * last digit: attend to the highest position it can see. qkv_padding_mask
 * makes the mask from the lengths, and with it the padding is hidden, so
 * the highest position seen is the last digit. Without it the highest
 * position is padding whenever a sequence is short, so the same weights
 * then do little better than chance; the program shows both.
 *
 * It prints the loss, the accuracy on fresh sequences with and without the
 * mask, and how many heap allocations the training steps after the first
 * made (0: the tape reuses its memory). It exits 0 when the masked
 * accuracy is at least 95%, the unmasked one below 80%, and no step
 * allocated.
 */
#include <stdio.h>
#include <string.h>

#include "qkv.h"

enum {
    L = 8,         /* padded length: the marker and up to 7 digits */
    CLS = 10,      /* the marker */
    PAD = 0,       /* padding (no digit is 0) */
    V = 11,        /* tokens: PAD, digits 1-9, CLS */
    D = 16,        /* d_model */
    H = 2,         /* heads */
    B = 64,        /* sequences per step */
    STEPS = 600,   /* training steps */
    TESTS = 8 * 64 /* fresh sequences, in batches of B */
};

typedef struct model {
    qkv_params *p;
    qkv_embedding tok, pos;
    qkv_mha attn;
    qkv_linear head;
} model;

static qkv_status model_init(model *m, qkv_error *err)
{
    if ((m->p = qkv_params_new(7, err)) == NULL)
        return err->status;
    qkv_status s = qkv_embedding_init(&m->tok, m->p, "tok", V, D, err);
    if (s == QKV_OK)
        s = qkv_positions_init(&m->pos, m->p, "pos", L, D, err);
    if (s == QKV_OK)
        s = qkv_mha_init(&m->attn, m->p, "attn", D, H, 0, err);
    if (s == QKV_OK)
        s = qkv_linear_init(&m->head, m->p, "head", D, 2, 1, err);
    return s;
}

/* Logits [B, 2]: the marker's output after attention over ids [B, L],
 * with the padding hidden when lengths is not NULL. */
static qkv_tensor *forward(qkv_tape *t, const model *m, const int *ids, const int *lengths)
{
    qkv_tensor *x = qkv_embedding_forward(t, &m->tok, ids, 2, (const int[]){B, L});
    x = qkv_add_positions(t, x, m->pos.weight);
    const qkv_tensor *pad = lengths != NULL ? qkv_padding_mask(t, B, L, lengths) : NULL;
    qkv_tensor *y = qkv_mha_forward(t, &m->attn, x, pad, NULL); /* [B, L, D] */
    qkv_tensor *cls = qkv_reshape(t, qkv_slice(t, y, 1, 0, 1), 2, (const int[]){B, D});
    return qkv_linear_forward(t, &m->head, cls);
}

/* B random sequences: ids [B, L], each one's length (the marker included)
 * and label. */
static void batch(qkv_rng *g, int *ids, int *lengths, int *labels)
{
    for (int b = 0; b < B; b++) {
        const int n = 1 + (int)qkv_rng_below(g, L - 1); /* digits: 1 to L - 1 */
        int *row = ids + b * L;
        row[0] = CLS;
        for (int j = 1; j < L; j++)
            row[j] = j <= n ? 1 + (int)qkv_rng_below(g, 9) : PAD;
        lengths[b] = n + 1;
        labels[b] = row[n] % 2;
    }
}

/* The share of TESTS fresh sequences (from seed 99) classified right. */
static double accuracy(qkv_tape *t, const model *m, int masked, qkv_error *err)
{
    int ids[B * L], lengths[B], labels[B], pred[B], right = 0;
    qkv_rng g;
    qkv_rng_seed(&g, 99);
    qkv_tape_set_grad(t, 0);
    for (int k = 0; k < TESTS / B; k++) {
        batch(&g, ids, lengths, labels);
        qkv_tape_reset(t);
        qkv_tensor *logits = forward(t, m, ids, masked ? lengths : NULL);
        if (qkv_tape_status(t) != QKV_OK) {
            qkv_error_set(err, qkv_tape_status(t), "%s", qkv_tape_error(t));
            return -1;
        }
        if (qkv_argmax_dim(logits, 1, pred, B, err) != QKV_OK)
            return -1;
        for (int b = 0; b < B; b++)
            right += pred[b] == labels[b];
    }
    qkv_tape_set_grad(t, 1);
    return (double)right / TESTS;
}

int main(int argc, char **argv)
{
    if (argc > 1) { /* it takes none: --help says what it does */
        const int help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0;
        if (!help) {
            char arg[256]; /* escaped: an argument cannot steer the terminal */
            qkv_escape(arg, sizeof arg, argv[1]);
            fprintf(stderr, "padding: unexpected argument '%s'\n", arg);
        }
        fprintf(help ? stdout : stderr,
                "usage: padding\n"
                "Trains attention on padded sequences of different lengths, with the\n"
                "padding mask made from their lengths. It takes no arguments.\n");
        return help ? 0 : 2;
    }
    qkv_error err = qkv_error_none();
    model m = {0};
    qkv_tape *t = NULL;
    qkv_optim *opt = NULL;
    int rc = 1;
    if (model_init(&m, &err) != QKV_OK || (t = qkv_tape_new(0, &err)) == NULL) {
        fprintf(stderr, "padding: %s\n", err.message);
        goto done;
    }
    qkv_optim_config oc = qkv_optim_defaults(QKV_ADAM);
    oc.lr = 1e-2;
    if ((opt = qkv_params_optim(m.p, &oc, &err)) == NULL) {
        fprintf(stderr, "padding: %s\n", err.message);
        goto done;
    }
    int ids[B * L], lengths[B], labels[B];
    qkv_rng g;
    qkv_rng_seed(&g, 1);
    size_t allocs = 0;
    for (int step = 0; step < STEPS; step++) {
        if (step == 1)
            allocs = qkv_alloc_count();
        batch(&g, ids, lengths, labels);
        qkv_params_zero_grad(m.p);
        qkv_tape_reset(t);
        qkv_tensor *loss = qkv_cross_entropy(t, forward(t, &m, ids, lengths), labels);
        if (qkv_backward(t, loss) != QKV_OK || qkv_optim_step(opt) != QKV_OK) {
            /* the tape's reason, else the optimizer's (a gradient or update not finite) */
            fprintf(stderr, "padding: step %d: %s\n", step,
                    qkv_tape_status(t) != QKV_OK ? qkv_tape_error(t) : qkv_optim_error(opt));
            goto done;
        }
        if ((step + 1) % 200 == 0)
            printf("step %d  loss %.4f\n", step + 1, (double)loss->data[0]);
    }
    allocs = qkv_alloc_count() - allocs;
    const double with = accuracy(t, &m, 1, &err), without = accuracy(t, &m, 0, &err);
    if (with < 0 || without < 0) {
        fprintf(stderr, "padding: %s\n", err.message);
        goto done;
    }
    printf("accuracy on %d fresh sequences, padding masked: %.4f\n", TESTS, with);
    printf("the same weights with the padding left visible: %.4f\n", without);
    printf("heap allocations in steps 2 to %d: %zu\n", STEPS, allocs);
    rc = with >= 0.95 && without < 0.8 && allocs == 0 ? 0 : 1;
done:
    qkv_optim_free(opt);
    qkv_tape_free(t);
    qkv_params_free(m.p);
    return rc;
}
