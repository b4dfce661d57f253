/*
 * train_coref.c - the whole coreference training loop on the public API.
 *
 * Builds the data, makes the model (Wq, Wk, Wv, Wo), trains with Adam, and
 * resolves the tutorial's sentence 「小明是个运动达人，他平时很爱打篮球」.
 * `qkv train` is this loop plus logging, checkpoints and flags.
 *
 * It builds in the source tree only (make builds it): the app's header
 * and library (include/apps/, libqkvapps.a) are not installed by make
 * install, which installs the library alone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/coref.h" /* the tutorial's task, an app on the library */
#include "qkv.h"

enum { STEPS = 300, BATCH = 32 };

/* Fills the batch from a shuffled order of the training set, reshuffled
 * at the start of every epoch. */
static void next_batch(qkv_rng *g, qkv_coref_batch *b, const qkv_coref_data *d, int *order,
                       int *next)
{
    qkv_coref_batch_clear(b);
    while (b->B < b->cap_b) {
        if (*next == 0)
            qkv_rng_shuffle(g, order, (size_t)d->n_train, sizeof *order);
        const qkv_coref_example *ex = &d->train[order[*next]];
        qkv_coref_batch_add(b, ex->ids, ex->len, ex->pronoun, ex->target, ex->antecedent);
        *next = (*next + 1) % d->n_train;
    }
}

int main(int argc, char **argv)
{
    if (argc > 1) { /* it takes none: --help says what it does */
        const int help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0;
        if (!help) {
            char arg[256]; /* escaped: an argument cannot steer the terminal */
            qkv_escape(arg, sizeof arg, argv[1]);
            fprintf(stderr, "train_coref: unexpected argument '%s'\n", arg);
        }
        fprintf(help ? stdout : stderr,
                "usage: train_coref\n"
                "Trains the coreference model (Wq, Wk, Wv, Wo) with Adam, then resolves the\n"
                "tutorial's sentence 小明是个运动达人，他平时很爱打篮球. It takes no arguments.\n");
        return help ? 0 : 2;
    }
    qkv_error err = qkv_error_none();
    qkv_coref_data data = {0};
    qkv_coref_model *model = NULL;
    qkv_optim *opt = NULL;
    qkv_tape *tape = NULL;
    qkv_coref_batch *batch = NULL;
    int *order = NULL, next = 0, rc = 1;
    if (qkv_coref_data_build(&data, 1 | 2 | 4, 1, &err) != QKV_OK)
        goto fail;
    qkv_coref_config mc = {qkv_coref_vocab_size(), 16, qkv_coref_classes(), 1, 0.1, 1};
    qkv_optim_config oc = qkv_optim_defaults(QKV_ADAM);
    oc.lr = 0.05;
    if ((model = qkv_coref_model_new(&mc, &err)) == NULL ||
        (opt = qkv_optim_new(&oc, model->params, QKV_COREF_PARAMS, &err)) == NULL ||
        (tape = qkv_tape_new(0, &err)) == NULL ||
        (batch = qkv_coref_batch_new(BATCH, QKV_COREF_MAX_TOKENS, &err)) == NULL)
        goto fail;
    if ((order = malloc(sizeof *order * (size_t)data.n_train)) == NULL) {
        qkv_error_set(&err, QKV_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < data.n_train; i++)
        order[i] = i;
    qkv_rng g;
    qkv_rng_seed(&g, 2);

    for (int step = 1; step <= STEPS; step++) {
        qkv_coref_out f;
        next_batch(&g, batch, &data, order, &next);
        /* zero grads, reset the tape, forward, backward, Adam step */
        qkv_status s = qkv_coref_train_step(model, opt, tape, batch, &f);
        if (s != QKV_OK) {
            qkv_error_set(&err, s, "step %d: %s", step, qkv_tape_error(tape));
            goto fail;
        }
        if (step % 50 == 0) {
            qkv_coref_stats st;
            qkv_coref_stats_of(&f, batch, &st);
            printf("step %3d  loss %.4f  acc %.2f  attention on antecedent %.3f\n", step, st.loss,
                   (double)st.correct / st.items, st.mark_mass);
        }
    }

    /* resolve the tutorial's sentence without recording gradients */
    int ids[QKV_COREF_MAX_TOKENS], n, pron = -1;
    if (qkv_coref_tokenize("小明是个运动达人，他平时很爱打篮球", ids, QKV_COREF_MAX_TOKENS, &n,
                           &err) != QKV_OK)
        goto fail;
    for (int i = 0; i < n; i++)
        if (qkv_coref_kind(ids[i]) == QKV_COREF_HE)
            pron = i;
    qkv_coref_batch_clear(batch);
    qkv_coref_batch_add(batch, ids, n, pron, QKV_IGNORE, qkv_coref_word_id("小明"));
    qkv_tape_reset(tape);
    qkv_tape_set_grad(tape, 0);
    qkv_coref_out f;
    if (qkv_coref_forward(model, tape, batch, &f) != QKV_OK) {
        qkv_error_set(&err, qkv_tape_status(tape), "%s", qkv_tape_error(tape));
        goto fail;
    }
    double p;
    int cls = qkv_coref_predict(&f, 0, &p);
    printf("他 → %s (p = %.2f); attention on 小明: %.3f\n", qkv_coref_word(qkv_coref_name_id(cls)),
           p, f.attn->data[(size_t)pron * batch->T + 0]);
    rc = 0;
fail:
    if (rc != 0)
        fprintf(stderr, "train_coref: %s\n", err.message);
    free(order);
    qkv_coref_batch_free(batch);
    qkv_tape_free(tape);
    qkv_optim_free(opt);
    qkv_coref_model_free(model);
    qkv_coref_data_free(&data);
    return rc;
}
