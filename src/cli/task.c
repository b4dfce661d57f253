/*
 * task.c - glue between the coreference data and the model, shared by the
 * train, eval, resolve and saturation commands.
 */
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

void task_add(qkv_batch *b, const qkv_example *ex)
{
    qkv_batch_add(b, ex->ids, ex->len, ex->pronoun, ex->target, ex->antecedent);
}

qkv_status task_evaluate(qkv_model *m, qkv_tape *t, qkv_batch *b, const qkv_example *ex, int n,
                         int level, task_eval *out)
{
    double loss = 0, mass = 0;
    int correct = 0, count = 0;
    int old = qkv_tape_set_grad(t, 0);
    qkv_status s = QKV_OK;
    for (int i = 0; i < n && s == QKV_OK;) {
        qkv_batch_clear(b);
        for (; i < n && b->B < b->cap_b; i++)
            if (level == 0 || ex[i].level == level)
                task_add(b, &ex[i]);
        if (b->B == 0)
            continue;
        qkv_forward f;
        qkv_attn_stats st;
        qkv_tape_reset(t);
        s = qkv_model_forward(m, t, b, &f);
        if (s != QKV_OK)
            break;
        qkv_attn_stats_of(&f, b, &st);
        loss += st.loss * b->B;
        mass += st.mark_mass * b->B;
        correct += st.correct;
        count += b->B;
    }
    qkv_tape_set_grad(t, old);
    out->n = count;
    out->loss = count ? loss / count : 0;
    out->mass = count ? mass / count : 0;
    out->acc = count ? (double)correct / count : 0;
    return s;
}

void task_next_batch(qkv_rng *g, qkv_batch *b, const qkv_example *ex, int *order, int n, int *pos)
{
    qkv_batch_clear(b);
    while (b->B < b->cap_b) {
        if (*pos == 0)
            qkv_rng_shuffle(g, order, (size_t)n, sizeof *order);
        task_add(b, &ex[order[*pos]]);
        *pos = (*pos + 1) % n;
    }
}

qkv_model *task_load(const char *path)
{
    char err[512];
    qkv_status s;
    struct stat sb;
    if (path == NULL) {
        path = CLI_DEFAULT_MODEL;
        if (stat(path, &sb) != 0) {
            cli_fail("no model at %s: run 'qkv train' first, or pass --model FILE", path);
            return NULL;
        }
    }
    qkv_model *m = qkv_model_load(path, qkv_vocab_fingerprint(), &s, err, sizeof err);
    if (m == NULL)
        cli_fail("%s", err);
    else if (m->cfg.vocab != qkv_vocab_size() || m->cfg.classes != qkv_coref_classes()) {
        cli_fail("%s: model shapes do not fit this task", path);
        qkv_model_free(m);
        m = NULL;
    }
    return m;
}
