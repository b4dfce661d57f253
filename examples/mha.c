/*
 * mha.c - multi-head causal self-attention built from the library's ops,
 * the way the tutorial's next article describes it: one [D,3D] projection
 * makes Q, K and V together; reshape and permute split each into H heads
 * of width D/H, [B,H,T,d_h]; qkv_attention runs every head at once; the
 * heads are merged back and projected out.
 *
 * The task: at every position, name the token one place back. Only
 * attention to the previous position can do it, so the model must learn
 * positions (a learned table added to the token embeddings) and a
 * "previous token" head. It prints the accuracy on fresh sequences and how
 * many heap allocations the training steps after the first made.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "qkv.h"

enum { V = 16, T = 8, D = 32, H = 4, DH = D / H, B = 32, STEPS = 500 };

typedef struct model {
    qkv_tensor *emb, *pos, *wqkv, *wo, *out; /* (V,D) (T,D) (D,3D) (D,D) (D,V) */
    qkv_tensor *p[5];
} model;

/* [B,T,D] -> [B,H,T,d_h]: the heads split out, each a [T,d_h] matrix. */
static qkv_tensor *heads(qkv_tape *t, qkv_tensor *x)
{
    qkv_tensor *split = qkv_reshape(t, x, 4, (const int[]){B, T, H, DH});
    return qkv_permute(t, split, (const int[]){0, 2, 1, 3});
}

/* The logits [B,T,V] of a batch of token ids (B·T of them). */
static qkv_tensor *forward(qkv_tape *t, const model *m, const int *ids, const qkv_tensor *causal)
{
    qkv_tensor *x = qkv_add(t, qkv_gather(t, m->emb, ids, 2, (const int[]){B, T}), m->pos);
    qkv_tensor *qkv = qkv_matmul(t, x, m->wqkv); /* [B,T,3D]: Q, K, V side by side */
    qkv_tensor *q = heads(t, qkv_slice(t, qkv, 2, 0, D));
    qkv_tensor *k = heads(t, qkv_slice(t, qkv, 2, D, D));
    qkv_tensor *v = heads(t, qkv_slice(t, qkv, 2, 2 * D, D));
    /* softmax(Q·Kᵀ/√d_h + causal mask)·V for every (item, head): [B,H,T,d_h] */
    qkv_tensor *o = qkv_attention(t, q, k, v, causal, 1 / sqrt((double)DH), NULL);
    qkv_tensor *merged =
        qkv_reshape(t, qkv_permute(t, o, (const int[]){0, 2, 1, 3}), 3, (const int[]){B, T, D});
    qkv_tensor *h = qkv_add(t, x, qkv_matmul(t, merged, m->wo)); /* a residual connection */
    return qkv_matmul(t, h, m->out);
}

/* A batch of random sequences; the target at i is the token at i - 1. */
static void batch(qkv_rng *g, int *ids, int *targets)
{
    for (int b = 0; b < B; b++)
        for (int i = 0; i < T; i++) {
            ids[b * T + i] = (int)qkv_rng_below(g, V);
            targets[b * T + i] = i == 0 ? QKV_IGNORE : ids[b * T + i - 1];
        }
}

int main(int argc, char **argv)
{
    if (argc > 1) { /* it takes none: --help says what it does */
        const int help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0;
        if (!help) {
            char arg[256]; /* escaped: an argument cannot steer the terminal */
            qkv_escape(arg, sizeof arg, argv[1]);
            fprintf(stderr, "mha: unexpected argument '%s'\n", arg);
        }
        fprintf(help ? stdout : stderr,
                "usage: mha\n"
                "Trains multi-head causal self-attention to name the previous token and\n"
                "prints its accuracy on fresh sequences. It takes no arguments.\n");
        return help ? 0 : 2;
    }
    static const int shapes[5][2] = {{V, D}, {T, D}, {D, 3 * D}, {D, D}, {D, V}};
    qkv_error err = qkv_error_none();
    model m = {0};
    qkv_tape *t = NULL;
    qkv_optim *opt = NULL;
    int rc = 1;
    qkv_rng g;
    qkv_rng_seed(&g, 4);
    for (int i = 0; i < 5; i++) {
        m.p[i] = qkv_tensor_new(2, shapes[i], 1, &err);
        for (size_t j = 0; !qkv_tensor_is_nil(m.p[i]) && j < m.p[i]->numel; j++)
            m.p[i]->data[j] = (qkv_real)qkv_rng_normalvariate(&g, 0, 1 / sqrt((double)D));
    }
    m.emb = m.p[0], m.pos = m.p[1], m.wqkv = m.p[2], m.wo = m.p[3], m.out = m.p[4];
    qkv_optim_config oc = qkv_optim_defaults(QKV_ADAM);
    oc.lr = 0.01;
    if (err.status != QKV_OK || (t = qkv_tape_new(0, &err)) == NULL ||
        (opt = qkv_optim_new(&oc, m.p, 5, &err)) == NULL) {
        fprintf(stderr, "mha: %s\n", err.message);
        goto done;
    }
    int ids[B * T], targets[B * T];
    size_t allocs = 0;
    for (int step = 1; step <= STEPS; step++) {
        if (step == 2)
            allocs = qkv_alloc_count();
        batch(&g, ids, targets);
        qkv_optim_zero_grad(opt);
        qkv_tape_reset(t);
        /* key j is hidden from query i when j > i */
        qkv_tensor *causal = qkv_tape_tensor(t, 2, (const int[]){T, T}, 0);
        for (int i = 0; i < T * T && !qkv_tensor_is_nil(causal); i++)
            causal->data[i] = i % T > i / T ? -INFINITY : 0;
        qkv_tensor *logits = forward(t, &m, ids, causal);
        qkv_tensor *loss = qkv_cross_entropy(t, logits, targets);
        if (qkv_backward(t, loss) != QKV_OK || qkv_optim_step(opt) != QKV_OK) {
            /* the tape's reason, else the optimizer's (a gradient or update not finite) */
            fprintf(stderr, "mha: step %d: %s\n", step,
                    qkv_tape_status(t) != QKV_OK ? qkv_tape_error(t) : qkv_optim_error(opt));
            goto done;
        }
        if (step % 100 == 0)
            printf("step %3d  loss %.4f\n", step, (double)loss->data[0]);
    }
    allocs = qkv_alloc_count() - allocs;

    /* accuracy on fresh sequences, without recording gradients */
    int correct = 0, counted = 0;
    for (int rep = 0; rep < 8; rep++) {
        batch(&g, ids, targets);
        qkv_tape_reset(t);
        qkv_tape_set_grad(t, 0);
        qkv_tensor *causal = qkv_tape_tensor(t, 2, (const int[]){T, T}, 0);
        for (int i = 0; i < T * T && !qkv_tensor_is_nil(causal); i++)
            causal->data[i] = i % T > i / T ? -INFINITY : 0;
        qkv_tensor *logits = forward(t, &m, ids, causal);
        if (qkv_tape_status(t) != QKV_OK) {
            fprintf(stderr, "mha: %s\n", qkv_tape_error(t));
            goto done;
        }
        for (int r = 0; r < B * T; r++) {
            if (targets[r] == QKV_IGNORE)
                continue;
            int best = 0;
            for (int c = 1; c < V; c++)
                if (logits->data[r * V + c] > logits->data[r * V + best])
                    best = c;
            correct += best == targets[r];
            counted++;
        }
    }
    printf("previous-token accuracy on fresh sequences: %.4f (%d of %d)\n",
           (double)correct / counted, correct, counted);
    printf("heap allocations in steps 2 to %d: %zu\n", STEPS, allocs);
    rc = correct >= 0.99 * counted && allocs == 0 ? 0 : 1;
done:
    qkv_optim_free(opt);
    qkv_tape_free(t);
    for (int i = 0; i < 5; i++)
        qkv_tensor_free(m.p[i]);
    return rc;
}
