/*
 * fit.c - the coreference model's training loop, its batches, and
 * evaluation over a split.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "apps/coref/fit.h"
#include "qkv/rng.h"
#include "util/util.h"

qkv_status qkv_coref_batch_add_example(qkv_coref_batch *b, const qkv_coref_example *ex)
{
    return qkv_coref_batch_add(b, ex->ids, ex->len, ex->pronoun, ex->target, ex->antecedent);
}

qkv_status qkv_coref_evaluate(qkv_coref_model *m, qkv_tape *t, qkv_coref_batch *b,
                              const qkv_coref_example *ex, int n, int level, qkv_coref_eval *out)
{
    double loss = 0, mass = 0;
    int correct = 0, count = 0;
    int old = qkv_tape_set_grad(t, 0), rows_only = m != NULL && m->rows_only;
    if (m != NULL)
        m->rows_only = 0; /* the mass on the antecedent reads the weights */
    qkv_status s = QKV_OK;
    for (int i = 0; i < n && s == QKV_OK;) {
        qkv_coref_batch_clear(b);
        for (; i < n && b->B < b->cap_b; i++)
            if (level == 0 || ex[i].level == level)
                qkv_coref_batch_add_example(b, &ex[i]);
        if (b->B == 0)
            continue;
        qkv_coref_out f;
        qkv_coref_stats st;
        qkv_tape_reset(t);
        s = qkv_coref_forward(m, t, b, &f);
        if (s != QKV_OK)
            break;
        qkv_coref_stats_of(&f, b, &st);
        loss += st.loss * b->B;
        mass += st.mark_mass * b->B;
        correct += st.correct;
        count += b->B;
    }
    qkv_tape_set_grad(t, old);
    if (m != NULL)
        m->rows_only = rows_only;
    out->n = count;
    out->loss = count ? loss / count : 0;
    out->mass = count ? mass / count : 0;
    out->acc = count ? (double)correct / count : 0;
    return s;
}

void qkv_coref_draw_batch(qkv_rng *g, qkv_coref_batch *b, const qkv_coref_example *ex, int *order,
                          int n, int *pos)
{
    qkv_coref_batch_clear(b);
    while (b->B < b->cap_b) {
        if (*pos == 0)
            qkv_rng_shuffle(g, order, (size_t)n, sizeof *order);
        qkv_coref_batch_add_example(b, &ex[order[*pos]]);
        *pos = (*pos + 1) % n;
    }
}

const char *qkv_coref_refusal(const qkv_optim *o, double loss)
{
    /* a loss that is not finite stops a step before the optimizer, whose
     * message is then an older step's */
    const char *why = o != NULL && isfinite(loss) ? qkv_optim_error(o) : "";
    return strncmp(why, "optim: ", 7) == 0 ? why + 7 : why;
}

qkv_status qkv_coref_diverged(qkv_error *err, int step, const qkv_optim *o, double loss)
{
    const char *why = qkv_coref_refusal(o, loss);
    return qkv_error_set(err, QKV_ERR_NUMERIC, "diverged at step %d: %s", step,
                         why[0] != '\0' ? why : "the loss or a gradient is not finite");
}

qkv_status qkv_coref_fit(qkv_coref_model *m, qkv_optim *o, qkv_tape *t, qkv_coref_batch *batch,
                         const qkv_coref_data *d, int steps, uint64_t batch_seed,
                         qkv_coref_hook hook, void *ctx, int *done, qkv_error *err)
{
    int updates = 0;
    if (done != NULL)
        *done = 0;
    if (m == NULL || o == NULL || t == NULL || batch == NULL || d == NULL)
        return qkv_error_set(err, QKV_ERR_ARG,
                             "fit: a model, optimizer, tape, batch and data "
                             "are all needed");
    if (d->n_train < 1)
        return qkv_error_set(err, QKV_ERR_ARG, "fit: the training split is empty");
    int *order = qkv_malloc(sizeof *order * (size_t)d->n_train);
    if (order == NULL)
        return qkv_error_set(err, QKV_ERR_NOMEM, "fit: out of memory");
    for (int i = 0; i < d->n_train; i++)
        order[i] = i;
    qkv_rng g;
    qkv_rng_seed(&g, batch_seed);
    int pos = 0;
    qkv_status s = QKV_OK;
    for (int step = 1; step <= steps; step++) {
        qkv_coref_out f;
        qkv_coref_draw_batch(&g, batch, d->train, order, d->n_train, &pos);
        s = qkv_coref_train_step(m, o, t, batch, &f);
        if (s == QKV_ERR_NUMERIC) {
            qkv_coref_diverged(err, step, o, (double)f.loss->data[0]);
            break;
        }
        if (s != QKV_OK) {
            qkv_error_set(err, s, "step %d: %s", step, qkv_tape_error(t));
            break;
        }
        updates = step;
        const qkv_coref_step info = {step, batch, &f};
        if (hook != NULL && (s = hook(ctx, &info)) != QKV_OK)
            break;
    }
    free(order);
    if (done != NULL)
        *done = updates;
    return s;
}
