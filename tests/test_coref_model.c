/*
 * test_coref_model.c - the coreference model: weights drawn as CPython draws them,
 * padding, the whole model's gradient check, the metrics on hand-worked
 * examples, and training that reaches the accuracy with a fixed seed.
 */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "tests.h"
#include "data/rng_golden.h"

START_TEST(test_model_weights_follow_cpython_normalvariate)
{
    /* seed 42, N(0, 0.1): Wq then Wk row by row, exactly as the tutorial */
    qkv_coref_config c = {8, 6, 3, 1, 0.1, 42};
    qkv_coref_model *m = qkv_coref_model_new(&c, NULL);
    ck_assert_ptr_nonnull(m);
    for (int i = 0; i < 48; i++) {
        ck_assert(m->wq->data[i] == (qkv_real)golden_normal_42_sd01[i]);
        ck_assert(m->wk->data[i] == (qkv_real)golden_normal_42_sd01[48 + i]);
    }
    qkv_coref_config bad = c;
    bad.d_k = 0;
    ck_assert_ptr_null(qkv_coref_model_new(&bad, NULL));
    /* the edges of the config: d_k up to QKV_COREF_MAX_DK and no further;
     * init_std 0 (every query, key and value weight 0) is valid */
    qkv_coref_config edge = c;
    edge.d_k = QKV_COREF_MAX_DK;
    qkv_coref_model *wide = qkv_coref_model_alloc(&edge, NULL);
    ck_assert_ptr_nonnull(wide);
    qkv_coref_model_free(wide);
    edge.d_k = QKV_COREF_MAX_DK + 1;
    qkv_error err = qkv_error_none();
    ck_assert_ptr_null(qkv_coref_model_alloc(&edge, &err));
    ck_assert_int_eq(err.status, QKV_ERR_ARG);
    edge = c;
    edge.init_std = 0;
    qkv_coref_model *flat = qkv_coref_model_new(&edge, NULL);
    ck_assert_ptr_nonnull(flat);
    ck_assert(flat->wq->data[0] == 0 && flat->wv->data[47] == 0);
    qkv_coref_model_free(flat);
    qkv_coref_model_free(m);
    qkv_coref_model_free(NULL);
}
END_TEST

START_TEST(test_batch_add_checks_its_arguments)
{
    qkv_coref_batch *b = qkv_coref_batch_new(1, 4, NULL);
    const int ids[5] = {1, 2, 3, 4, 5};
    ck_assert_int_eq(qkv_coref_batch_add(b, ids, 5, 0, 0, -1), QKV_ERR_ARG); /* too long */
    ck_assert_int_eq(qkv_coref_batch_add(b, ids, 3, 3, 0, -1),
                     QKV_ERR_ARG); /* query past the end */
    ck_assert_int_eq(qkv_coref_batch_add(b, ids, 3, 2, 0, -1), QKV_OK);
    ck_assert_int_eq(qkv_coref_batch_add(b, ids, 3, 2, 0, -1), QKV_ERR_ARG); /* full */
    ck_assert_int_eq(b->T, 3);
    ck_assert_ptr_null(qkv_coref_batch_new(0, 4, NULL));
    qkv_coref_batch_free(b);
    qkv_coref_batch_free(NULL);
}
END_TEST

START_TEST(test_padding_gets_no_attention)
{
    qkv_coref_config c = {10, 4, 3, 1, 1.0, 3};
    qkv_coref_model *m = qkv_coref_model_new(&c, NULL);
    qkv_coref_batch *b = qkv_coref_batch_new(2, 8, NULL);
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_coref_batch_add(b, (const int[]){1, 2, 3, 4, 5}, 5, 2, 1, 3);
    qkv_coref_batch_add(b, (const int[]){6, 7}, 2, 1, 0, 6);
    qkv_coref_out f;
    ck_assert_int_eq(qkv_coref_forward(m, t, b, &f), QKV_OK);
    ck_assert_int_eq(f.attn->shape[1], 5);
    for (int i = 0; i < 2; i++) /* item 1's rows: keys 2..4 are padding */
        for (int j = 0; j < 5; j++) {
            double a = f.attn->data[(5 + i) * 5 + j];
            if (j >= 2)
                ASSERT_NEAR(a, 0, 0);
        }
    for (int r = 0; r < 10; r++) {
        double s = 0;
        for (int j = 0; j < 5; j++)
            s += f.attn->data[r * 5 + j];
        ASSERT_NEAR(s, 1, 8 * REAL_EPS);
    }
    ck_assert(isfinite(f.loss->data[0]));
    qkv_tape_free(t);
    qkv_coref_batch_free(b);
    qkv_coref_model_free(m);
}
END_TEST

typedef struct model_ctx {
    qkv_coref_model *m;
    qkv_coref_batch *b;
} model_ctx;

static qkv_tensor *model_loss(qkv_tape *t, void *ctx)
{
    model_ctx *c = ctx;
    qkv_coref_out f;
    qkv_coref_forward(c->m, t, c->b, &f);
    return f.loss;
}

START_TEST(test_whole_model_gradcheck_on_real_sentences)
{
    qkv_coref_data d;
    ck_assert_int_eq(qkv_coref_data_build(&d, 7, 1, NULL), QKV_OK);
    qkv_coref_config c = {qkv_coref_vocab_size(), 3, qkv_coref_classes(), _i, 0.5, 4};
    qkv_coref_model *m = qkv_coref_model_new(&c, NULL);
    qkv_coref_batch *b = qkv_coref_batch_new(3, QKV_COREF_MAX_TOKENS, NULL);
    const int pick[3] = {0, d.n_train / 2, d.n_train - 1}; /* mixed lengths: padding */
    for (int i = 0; i < 3; i++) {
        const qkv_coref_example *e = &d.train[pick[i]];
        qkv_coref_batch_add(b, e->ids, e->len, e->pronoun, e->target, e->antecedent);
    }
    qkv_tape *t = qkv_tape_new(0, NULL);
    model_ctx ctx = {m, b};
    qkv_gradcheck_result res;
    ck_assert_int_eq(qkv_gradcheck(t, model_loss, &ctx, m->params, QKV_COREF_PARAMS, 0, 0, 0, &res),
                     QKV_OK);
    ck_assert_msg(res.passed, "max rel %.3e abs %.3e", res.max_rel, res.max_abs);
    /* every weight matrix receives a gradient */
    for (int i = 0; i < QKV_COREF_PARAMS; i++)
        ck_assert_double_gt(qkv_grad_norm(&m->params[i], 1), 0);
    qkv_tape_free(t);
    qkv_coref_batch_free(b);
    qkv_coref_model_free(m);
    qkv_coref_data_free(&d);
}
END_TEST

START_TEST(test_attention_metrics_by_hand)
{
    /* one item of length 2, padded to T = 3; query row 0 */
    qkv_coref_batch *b = qkv_coref_batch_new(1, 3, NULL);
    qkv_coref_batch_add(b, (const int[]){5, 7}, 2, 0, 1, 7);
    b->T = 3;
    /* rows 0 and 1: attention (0.5,0.5) and (1,0); scores (1,3), (2,2) */
    qkv_tensor *attn =
        tensor_of(3, (const int[]){1, 3, 3}, (const double[]){0.5, 0.5, 0, 1, 0, 0, 0, 0, 0}, 0);
    qkv_tensor *scores =
        tensor_of(3, (const int[]){1, 3, 3}, (const double[]){1, 3, 99, 2, 2, 99, 99, 99, 99}, 0);
    qkv_tensor *logits = tensor_of(2, (const int[]){1, 2}, (const double[]){0, 2}, 0);
    qkv_tensor *loss = tensor_of(0, NULL, (const double[]){0.25}, 0);
    qkv_coref_out f = {scores, attn, logits, loss};
    qkv_coref_stats st;
    qkv_coref_stats_of(&f, b, &st);
    ck_assert_int_eq(st.correct, 1);
    ASSERT_NEAR(st.loss, 0.25, 0);
    ASSERT_NEAR(st.entropy, (log(2.0) + 0) / 2, 1e-12); /* ln 2 and 0 */
    ASSERT_NEAR(st.max_weight, (0.5 + 1) / 2, 1e-12);
    ASSERT_NEAR(st.jacobian, (0.5 + 0) / 2, 1e-12); /* see test_kernels */
    ASSERT_NEAR(st.score_var, 0.5, 1e-12);          /* {1,3,2,2}: mean 2, var 2/4 */
    ASSERT_NEAR(st.mark_mass, 0.5, 0);              /* row 0 on token 7 */
    double p;
    ck_assert_int_eq(qkv_coref_predict(&f, 0, &p), 1);
    ASSERT_NEAR(p, 1 / (1 + exp(-2.0)), 1e-12);
    qkv_tensor_free(attn);
    qkv_tensor_free(scores);
    qkv_tensor_free(logits);
    qkv_tensor_free(loss);
    qkv_coref_batch_free(b);
}
END_TEST

/* Two items, only the first with a marked token: the mark mass is the mean
 * over marked items (0.5, the first item's query row on token 7), not over
 * all items (0.25). The second item's logits tie, and the argmax is the
 * first of them, as torch.argmax gives: class 0, its target, with p = 1/2. */
START_TEST(test_mark_mass_counts_marked_items_and_ties_go_to_the_first_class)
{
    qkv_coref_batch *b = qkv_coref_batch_new(2, 2, NULL);
    ck_assert_int_eq(qkv_coref_batch_add(b, (const int[]){5, 7}, 2, 0, 1, 7), QKV_OK);
    ck_assert_int_eq(qkv_coref_batch_add(b, (const int[]){5, 6}, 2, 0, 0, -1), QKV_OK);
    qkv_tensor *attn =
        tensor_of(3, (const int[]){2, 2, 2}, (const double[]){0.5, 0.5, 1, 0, 0.25, 0.75, 0, 1}, 0);
    qkv_tensor *scores = tensor_of(3, (const int[]){2, 2, 2}, NULL, 0);
    qkv_tensor *logits = tensor_of(2, (const int[]){2, 2}, (const double[]){0, 2, 1, 1}, 0);
    qkv_tensor *loss = tensor_of(0, NULL, (const double[]){0}, 0);
    qkv_coref_out f = {scores, attn, logits, loss};
    qkv_coref_stats st;
    qkv_coref_stats_of(&f, b, &st);
    ASSERT_NEAR(st.mark_mass, 0.5, 0);
    double p;
    ck_assert_int_eq(qkv_coref_predict(&f, 1, &p), 0);
    ASSERT_NEAR(p, 0.5, 0); /* 1/(e^0 + e^0), exact */
    ck_assert_int_eq(st.correct, 2);
    qkv_tensor_free(attn);
    qkv_tensor_free(scores);
    qkv_tensor_free(logits);
    qkv_tensor_free(loss);
    qkv_coref_batch_free(b);
}
END_TEST

/* A model with d_k columns, its optimizer (lr 0 keeps the default), a tape
 * and a batch of 32. */
typedef struct rig {
    qkv_coref_model *m;
    qkv_optim *o;
    qkv_tape *t;
    qkv_coref_batch *b;
} rig;

static rig rig_new(int d_k, qkv_optim_kind kind, double lr)
{
    qkv_coref_config c = {qkv_coref_vocab_size(), d_k, qkv_coref_classes(), 1, 0.1, 1};
    rig r = {qkv_coref_model_new(&c, NULL), NULL, qkv_tape_new(0, NULL),
             qkv_coref_batch_new(32, QKV_COREF_MAX_TOKENS, NULL)};
    qkv_optim_config oc = qkv_optim_defaults(kind);
    if (lr > 0)
        oc.lr = lr;
    r.o = qkv_optim_new(&oc, r.m->params, QKV_COREF_PARAMS, NULL);
    return r;
}

static void rig_free(rig *r)
{
    qkv_coref_batch_free(r->b);
    qkv_tape_free(r->t);
    qkv_optim_free(r->o);
    qkv_coref_model_free(r->m);
}

/* Runs steps training steps on batches of 32 sentences drawn with g. */
static void train_steps(qkv_coref_model *m, qkv_optim *o, qkv_tape *t, qkv_coref_batch *b,
                        const qkv_coref_data *d, qkv_rng *g, int steps)
{
    for (int step = 0; step < steps; step++) {
        qkv_coref_batch_clear(b);
        for (int i = 0; i < 32; i++) {
            const qkv_coref_example *e = &d->train[qkv_rng_choice(g, (size_t)d->n_train)];
            qkv_coref_batch_add(b, e->ids, e->len, e->pronoun, e->target, e->antecedent);
        }
        qkv_coref_out f;
        ck_assert_int_eq(qkv_coref_train_step(m, o, t, b, &f), QKV_OK);
    }
}

/* Trains like `qkv train` with its defaults; returns test accuracy and
 * attention mass, and whether Wq, Wk, Wv all moved. */
static void train_default(double *acc, double *mass, int *moved)
{
    qkv_coref_data d;
    ck_assert_int_eq(qkv_coref_data_build(&d, 7, 1, NULL), QKV_OK);
    rig r = rig_new(16, QKV_ADAM, 0.05);
    qkv_coref_model *m = r.m;
    qkv_tape *t = r.t;
    qkv_real *before = malloc(sizeof *before * 3 * m->wq->numel);
    for (int i = 0; i < 3; i++)
        memcpy(before + i * m->wq->numel, m->params[i]->data, sizeof *before * m->wq->numel);
    qkv_rng g;
    qkv_rng_seed(&g, 2);
    train_steps(m, r.o, t, r.b, &d, &g, 300);
    qkv_coref_batch *b = qkv_coref_batch_new(d.n_test, QKV_COREF_MAX_TOKENS, NULL);
    for (int i = 0; i < d.n_test; i++)
        qkv_coref_batch_add(b, d.test[i].ids, d.test[i].len, d.test[i].pronoun, d.test[i].target,
                            d.test[i].antecedent);
    qkv_tape_reset(t);
    qkv_tape_set_grad(t, 0);
    qkv_coref_out f;
    qkv_coref_stats st;
    ck_assert_int_eq(qkv_coref_forward(m, t, b, &f), QKV_OK);
    qkv_coref_stats_of(&f, b, &st);
    *acc = (double)st.correct / st.items;
    *mass = st.mark_mass;
    *moved = 0;
    for (int i = 0; i < 3; i++)
        *moved += memcmp(before + i * m->wq->numel, m->params[i]->data,
                         sizeof *before * m->wq->numel) != 0;
    free(before);
    qkv_coref_batch_free(b);
    rig_free(&r);
    qkv_coref_data_free(&d);
}

START_TEST(test_training_reaches_test_accuracy_with_a_fixed_seed)
{
    double acc, mass;
    int moved;
    train_default(&acc, &mass, &moved);
    ck_assert_msg(acc >= 0.99, "test accuracy %.4f", acc);
    ck_assert_msg(mass >= 0.9, "attention on the antecedent %.4f", mass);
    ck_assert_int_eq(moved, 3); /* Wq, Wk and Wv all changed */
}
END_TEST

/* A loss that overflows while every gradient stays finite: V's rows are
 * all (1, 0), so the attention output h is (1, 0) and the logits are Wo's
 * first row, -0.6·max for the target and +0.6·max for the other two. The
 * loss is about 1.2·max, which overflows; softmax - onehot is finite, and
 * so is dh = 0.6·max, spread over distinct tokens. The step must report
 * divergence and leave the weights as they were, not take an update
 * that the optimizer's finite-gradient check would let through. */
START_TEST(test_train_step_refuses_an_overflowing_loss)
{
    const double big = 0.6 * (sizeof(qkv_real) == sizeof(float) ? FLT_MAX : DBL_MAX);
    qkv_coref_config c = {10, 2, 3, 1, 1.0, 3};
    qkv_coref_model *m = qkv_coref_model_new(&c, NULL);
    for (int r = 0; r < 10; r++)
        m->wv->data[2 * r] = 1, m->wv->data[2 * r + 1] = 0;
    for (int k = 0; k < 3; k++)
        m->wo->data[k] = (qkv_real)(k == 0 ? -big : big), m->wo->data[3 + k] = 0;
    qkv_coref_batch *b = qkv_coref_batch_new(2, 8, NULL);
    qkv_coref_batch_add(b, (const int[]){1, 2, 3}, 3, 2, 0, 1);
    qkv_coref_batch_add(b, (const int[]){4, 5, 6}, 3, 2, 0, 4);
    qkv_optim_config oc = qkv_optim_defaults(QKV_SGD);
    oc.lr = 1e-3;
    qkv_optim *o = qkv_optim_new(&oc, m->params, QKV_COREF_PARAMS, NULL);
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_coref_out f;
    qkv_real before[20];
    memcpy(before, m->wv->data, sizeof before);
    ck_assert_int_eq(qkv_coref_train_step(m, o, t, b, &f), QKV_ERR_NUMERIC);
    ck_assert(isinf(f.loss->data[0]));
    for (int p = 0; p < QKV_COREF_PARAMS; p++) /* the premise: gradients finite */
        for (size_t i = 0; i < m->params[p]->numel; i++)
            ck_assert_msg(isfinite(m->params[p]->grad[i]), "param %d grad[%zu]", p, i);
    ck_assert_int_eq(memcmp(before, m->wv->data, sizeof before), 0);
    qkv_tape_free(t);
    qkv_optim_free(o);
    qkv_coref_batch_free(b);
    qkv_coref_model_free(m);
}
END_TEST

START_TEST(test_training_step_allocates_nothing_after_the_first)
{
    qkv_coref_data d;
    ck_assert_int_eq(qkv_coref_data_build(&d, 7, 1, NULL), QKV_OK);
    qkv_coref_config c = {qkv_coref_vocab_size(), 64, qkv_coref_classes(), 1, 0.1, 1};
    qkv_coref_model *m = qkv_coref_model_new(&c, NULL);
    qkv_optim_config oc = qkv_optim_defaults(QKV_ADAMW);
    oc.clip = 1;
    qkv_optim *o = qkv_optim_new(&oc, m->params, QKV_COREF_PARAMS, NULL);
    qkv_tape *t = qkv_tape_new(4096, NULL); /* small, so the arena must grow in step 1 */
    qkv_coref_batch *b = qkv_coref_batch_new(32, QKV_COREF_MAX_TOKENS, NULL);
    qkv_rng g;
    qkv_rng_seed(&g, 3);
    size_t after_first = 0;
    for (int step = 0; step < 20; step++) {
        qkv_coref_batch_clear(b);
        for (int i = 0; i < 32; i++) {
            /* the longest sentences first, so later batches need no more memory */
            const qkv_coref_example *e =
                &d.train[step == 0 ? (size_t)i : qkv_rng_choice(&g, (size_t)d.n_train)];
            qkv_coref_batch_add(b, e->ids, e->len, e->pronoun, e->target, e->antecedent);
        }
        if (step == 0) /* pad the first batch to the longest length there is */
            b->T = QKV_COREF_MAX_TOKENS;
        qkv_coref_out f;
        ck_assert_int_eq(qkv_coref_train_step(m, o, t, b, &f), QKV_OK);
        if (step == 0)
            after_first = qkv_alloc_count();
    }
    ck_assert_uint_eq(qkv_alloc_count(), after_first);
    ck_assert_uint_gt(qkv_tape_high_water(t), 4096);
    m->rows_only = 1; /* as qkv train steps: nothing either, after its first */
    for (int step = 0; step < 10; step++) {
        qkv_coref_out f;
        ck_assert_int_eq(qkv_coref_train_step(m, o, t, b, &f), QKV_OK);
        if (step == 0)
            after_first = qkv_alloc_count();
    }
    ck_assert_uint_eq(qkv_alloc_count(), after_first);
    qkv_coref_batch_free(b);
    qkv_tape_free(t);
    qkv_optim_free(o);
    qkv_coref_model_free(m);
    qkv_coref_data_free(&d);
}
END_TEST

/* Training with 1, 2 or 3 threads gives the same weights, bit for bit. The
 * model is wide (d_k = 512) so that the attention items are worth splitting
 * across threads (qkv_parallel_parts); padding and the AdamW step included. */
START_TEST(test_thread_count_changes_no_bit)
{
    qkv_coref_data d;
    ck_assert_int_eq(qkv_coref_data_build(&d, 7, 1, NULL), QKV_OK);
    qkv_real *first[QKV_COREF_PARAMS] = {NULL};
    for (int threads = 1; threads <= 3; threads++) {
        ck_assert_int_eq(qkv_threads_use(threads, NULL), 0);
        rig r = rig_new(512, QKV_ADAMW, 0);
        qkv_coref_model *m = r.m;
        qkv_rng g;
        qkv_rng_seed(&g, 4);
        train_steps(m, r.o, r.t, r.b, &d, &g, 4);
        for (int i = 0; i < QKV_COREF_PARAMS; i++) {
            size_t bytes = sizeof(qkv_real) * m->params[i]->numel;
            if (threads == 1) {
                first[i] = malloc(bytes);
                memcpy(first[i], m->params[i]->data, bytes);
            } else {
                ck_assert_msg(memcmp(first[i], m->params[i]->data, bytes) == 0,
                              "parameter %d differs with %d threads", i, threads);
            }
        }
        rig_free(&r);
    }
    for (int i = 0; i < QKV_COREF_PARAMS; i++)
        free(first[i]);
    ck_assert_int_eq(qkv_threads_use(0, NULL), QKV_ERR_ARG);
    ck_assert_int_eq(qkv_threads_use(65, NULL), QKV_ERR_ARG);
    qkv_threads_use(1, NULL);
    qkv_coref_data_free(&d);
}
END_TEST

/* Steps that make the pronoun's rows only (rows_only, as qkv train runs
 * them) leave the weights bit for bit where steps with every row leave
 * them, on every kernel set, with the same loss and accuracy each step;
 * their out has no scores or weights, and the statistics skip them. */
START_TEST(test_rows_only_steps_change_no_bit)
{
    static const char *impls[] = {"portable", "avx2", "avx512"};
    qkv_coref_data d;
    ck_assert_int_eq(qkv_coref_data_build(&d, 7, 1, NULL), QKV_OK);
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(impls[im], NULL) != 0)
            continue;
        rig r[2] = {rig_new(16, QKV_ADAM, 0.05), rig_new(16, QKV_ADAM, 0.05)};
        r[1].m->rows_only = 1;
        qkv_rng g;
        qkv_rng_seed(&g, 6);
        for (int step = 0; step < 12; step++) {
            qkv_coref_batch_clear(r[0].b);
            for (int i = 0; i < 32; i++) {
                const qkv_coref_example *e = &d.train[qkv_rng_choice(&g, (size_t)d.n_train)];
                qkv_coref_batch_add(r[0].b, e->ids, e->len, e->pronoun, e->target, e->antecedent);
            }
            qkv_coref_stats st[2];
            for (int k = 0; k < 2; k++) {
                qkv_coref_out f;
                ck_assert_int_eq(qkv_coref_train_step(r[k].m, r[k].o, r[k].t, r[0].b, &f), QKV_OK);
                ck_assert(k == 0 ? f.scores != NULL && f.attn != NULL
                                 : f.scores == NULL && f.attn == NULL);
                qkv_coref_stats_of(&f, r[0].b, &st[k]);
            }
            ck_assert(st[0].loss == st[1].loss && st[0].correct == st[1].correct);
            ck_assert(st[0].entropy > 0 && st[1].entropy == 0 && st[1].mark_mass == 0);
        }
        for (int i = 0; i < QKV_COREF_PARAMS; i++)
            ck_assert_msg(memcmp(r[0].m->params[i]->data, r[1].m->params[i]->data,
                                 sizeof(qkv_real) * r[0].m->params[i]->numel) == 0,
                          "%s: parameter %d differs", impls[im], i);
        rig_free(&r[0]);
        rig_free(&r[1]);
    }
    qkv_kernels_use("auto", NULL);
    qkv_coref_data_free(&d);
}
END_TEST

START_TEST(test_entropy_of_known_distributions)
{
    const qkv_real half[2] = {0.5, 0.5}, onehot[3] = {0, 1, 0}, quarter[4] = {.25, .25, .25, .25};
    ASSERT_NEAR(qkv_coref_entropy(half, 2), log(2.0), 1e-15);
    ASSERT_NEAR(qkv_coref_entropy(onehot, 3), 0, 0);
    ASSERT_NEAR(qkv_coref_entropy(quarter, 4), log(4.0), 1e-15);
    /* H(0.9, 0.1) = -(0.9 ln 0.9 + 0.1 ln 0.1) = 0.325082973391448 */
    const qkv_real skew[2] = {0.9f, 0.1f};
    ASSERT_NEAR(qkv_coref_entropy(skew, 2), 0.325082973391448, 1e-6);
}
END_TEST

START_TEST(test_jacobian_norm_of_known_distributions)
{
    /* a = (1/2, 1/2): J = [[1/4, -1/4], [-1/4, 1/4]], ||J||_F = sqrt(4/16) = 1/2 */
    const qkv_real half[2] = {0.5, 0.5}, onehot[3] = {0, 1, 0};
    ASSERT_NEAR(qkv_coref_jacobian_norm(half, 2), 0.5, 1e-15);
    /* saturated softmax: J = 0 */
    ASSERT_NEAR(qkv_coref_jacobian_norm(onehot, 3), 0, 0);
    /* uniform over n: diag (1/n)(1-1/n), off-diag -1/n²:
     * ||J||² = n(1/n - 1/n²)² + n(n-1)/n⁴ = (n-1)/n², n = 4 -> sqrt(3)/4 */
    const qkv_real q[4] = {.25, .25, .25, .25};
    ASSERT_NEAR(qkv_coref_jacobian_norm(q, 4), sqrt(3.0) / 4, 1e-15);
    /* a = (0.7, 0.2, 0.1), entries written out by hand:
     * diag 0.21, 0.16, 0.09; off-diag -0.14, -0.07, -0.02 (each twice)
     * ||J||² = 0.0441+0.0256+0.0081 + 2(0.0196+0.0049+0.0004) = 0.1276 */
    const qkv_real a[3] = {0.7f, 0.2f, 0.1f};
    ASSERT_NEAR(qkv_coref_jacobian_norm(a, 3), sqrt(0.1276), 1e-6);
}
END_TEST

/* Evaluation averages over the items, across its batches: with Wo all
 * zero every logit is 0 and each item's loss is ln 12 (math.log(12) =
 * 2.4849066497880004), whatever the batch size. */
START_TEST(test_evaluate_averages_the_loss_over_items)
{
    qkv_coref_config c = {qkv_coref_vocab_size(), 4, qkv_coref_classes(), 1, 0.1, 3};
    qkv_coref_model *m = qkv_coref_model_new(&c, NULL);
    ck_assert_ptr_nonnull(m);
    memset(m->wo->data, 0, sizeof *m->wo->data * m->wo->numel);
    qkv_coref_data d;
    ck_assert_int_eq(qkv_coref_data_build(&d, 1, 2, NULL), QKV_OK);
    ck_assert_int_gt(d.n_val, 8); /* more than one batch of 8 */
    qkv_coref_batch *b = qkv_coref_batch_new(8, QKV_COREF_MAX_TOKENS, NULL);
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_coref_eval e;
    ck_assert_int_eq(qkv_coref_evaluate(m, t, b, d.val, d.n_val, 0, &e), QKV_OK);
    ck_assert_int_eq(e.n, d.n_val);
    ASSERT_NEAR(e.loss, 2.4849066497880004, 1e-5);
    qkv_tape_free(t);
    qkv_coref_batch_free(b);
    qkv_coref_data_free(&d);
    qkv_coref_model_free(m);
}
END_TEST

/* What the fit tests train: a small model, SGD, a tape and batches of 4. */
static rig fit_rig_new(void)
{
    qkv_coref_config c = {qkv_coref_vocab_size(), 4, qkv_coref_classes(), 1, 0.1, 3};
    rig r = {qkv_coref_model_new(&c, NULL), NULL, qkv_tape_new(0, NULL),
             qkv_coref_batch_new(4, QKV_COREF_MAX_TOKENS, NULL)};
    qkv_optim_config oc = qkv_optim_defaults(QKV_SGD);
    r.o = qkv_optim_new(&oc, r.m->params, QKV_COREF_PARAMS, NULL);
    return r;
}

/* What a fit's hook saw: the training split, how many items it has
 * checked, and the first that was not the item CPython's order puts there
 * (-1 for none). */
typedef struct order_log {
    const qkv_coref_data *d;
    int k, bad;
} order_log;

static qkv_status check_order(void *ctx, const qkv_coref_step *s)
{
    order_log *g = ctx;
    const qkv_coref_batch *b = s->batch;
    for (int j = 0; j < b->B; j++, g->k++) {
        const qkv_coref_example *e = &g->d->train[golden_shuffle_11[g->k]];
        int same = b->len[j] == e->len && b->target[j] == e->target;
        for (int i = 0; same && i < e->len; i++)
            same = b->ids[(size_t)j * (size_t)b->cap_t + (size_t)i] == e->ids[i];
        if (!same && g->bad < 0)
            g->bad = g->k;
    }
    return QKV_OK;
}

/* fit.h: the items come in the order that a qkv_rng seeded with
 * batch_seed shuffles the training split into, as CPython's
 * random.seed(11); random.shuffle(order) does: with 100 items and seed 11,
 * one epoch of 25 batches of 4 is golden_shuffle_11 (rng_golden.h, from
 * CPython) item by item. */
START_TEST(test_fit_draws_items_in_cpythons_shuffled_order)
{
    rig r = fit_rig_new();
    qkv_coref_data d;
    ck_assert_int_eq(qkv_coref_data_build(&d, 7, 2, NULL), QKV_OK);
    ck_assert_int_ge(d.n_train, 100);
    d.n_train = 100; /* the first 100 items, as the golden shuffle's */
    order_log g = {&d, 0, -1};
    int done = 0;
    ck_assert_int_eq(qkv_coref_fit(r.m, r.o, r.t, r.b, &d, 25, 11, check_order, &g, &done, NULL),
                     QKV_OK);
    ck_assert_int_eq(done, 25);
    ck_assert_int_eq(g.k, 100);
    ck_assert_msg(g.bad < 0, "item %d of the epoch is not train[%u]", g.bad,
                  g.bad < 0 ? 0u : golden_shuffle_11[g.bad]);
    qkv_coref_data_free(&d);
    rig_free(&r);
}
END_TEST

/* qkv_coref_fit counts the updates it made, and refuses an empty
 * training split before it draws a batch. */
START_TEST(test_fit_counts_its_steps_and_refuses_an_empty_split)
{
    rig r = fit_rig_new();
    qkv_coref_data d;
    ck_assert_int_eq(qkv_coref_data_build(&d, 1, 2, NULL), QKV_OK);
    int done = -1;
    qkv_error err = qkv_error_none();
    ck_assert_int_eq(qkv_coref_fit(r.m, r.o, r.t, r.b, &d, 3, 7, NULL, NULL, &done, &err), QKV_OK);
    ck_assert_int_eq(done, 3);
    qkv_coref_data empty;
    memset(&empty, 0, sizeof empty);
    done = -1;
    ck_assert_int_eq(qkv_coref_fit(r.m, r.o, r.t, r.b, &empty, 3, 7, NULL, NULL, &done, &err),
                     QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "fit: the training split is empty");
    ck_assert_int_eq(done, 0);
    qkv_coref_data_free(&d);
    rig_free(&r);
}
END_TEST

/* fit.h: qkv_coref_refusal is the optimizer's account of a step it
 * refused, without its "optim: ", for a finite loss, and "" for a loss
 * that is not: that stops a step before the optimizer, whose message is
 * then an older step's. So a fit whose loss is NaN after a refused step
 * does not name that step's gradient. */
START_TEST(test_fit_names_a_refused_gradient_only_for_a_finite_loss)
{
    rig r = fit_rig_new();
    ck_assert_str_eq(qkv_coref_refusal(r.o, 1), ""); /* no step yet */
    qkv_optim_zero_grad(r.o);
    r.m->wk->grad[5] = INFINITY;
    ck_assert_int_eq(qkv_optim_step(r.o), QKV_ERR_NUMERIC);
    ck_assert_str_eq(
        qkv_coref_refusal(r.o, 1),
        "the gradient of parameter 1 is not finite: grad[5] = infinity; no parameter was "
        "changed");
    ck_assert_str_eq(qkv_coref_refusal(r.o, NAN), "");
    ck_assert_str_eq(qkv_coref_refusal(r.o, -INFINITY), "");
    ck_assert_str_eq(qkv_coref_refusal(NULL, 1), "");
    for (size_t i = 0; i < r.m->wo->numel; i++) /* every logit, so the loss, NaN */
        r.m->wo->data[i] = NAN;
    qkv_coref_data d;
    ck_assert_int_eq(qkv_coref_data_build(&d, 1, 2, NULL), QKV_OK);
    int done = -1;
    qkv_error err = qkv_error_none();
    ck_assert_int_eq(qkv_coref_fit(r.m, r.o, r.t, r.b, &d, 3, 7, NULL, NULL, &done, &err),
                     QKV_ERR_NUMERIC);
    ck_assert_int_eq(done, 0);
    ck_assert_str_eq(err.message, "diverged at step 1: the loss or a gradient is not finite");
    qkv_coref_data_free(&d);
    rig_free(&r);
}
END_TEST

Suite *coref_model_suite(void)
{
    Suite *s = suite_create("coref_model");
    TCase *tc = tcase_create("model");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_model_weights_follow_cpython_normalvariate);
    tcase_add_test(tc, test_batch_add_checks_its_arguments);
    tcase_add_test(tc, test_padding_gets_no_attention);
    tcase_add_loop_test(tc, test_whole_model_gradcheck_on_real_sentences, 0, 2);
    tcase_add_test(tc, test_attention_metrics_by_hand);
    tcase_add_test(tc, test_mark_mass_counts_marked_items_and_ties_go_to_the_first_class);
    tcase_add_test(tc, test_training_reaches_test_accuracy_with_a_fixed_seed);
    tcase_add_test(tc, test_train_step_refuses_an_overflowing_loss);
    tcase_add_test(tc, test_training_step_allocates_nothing_after_the_first);
    tcase_add_test(tc, test_thread_count_changes_no_bit);
    tcase_add_test(tc, test_rows_only_steps_change_no_bit);
    tcase_add_test(tc, test_entropy_of_known_distributions);
    tcase_add_test(tc, test_jacobian_norm_of_known_distributions);
    tcase_add_test(tc, test_evaluate_averages_the_loss_over_items);
    tcase_add_test(tc, test_fit_counts_its_steps_and_refuses_an_empty_split);
    tcase_add_test(tc, test_fit_names_a_refused_gradient_only_for_a_finite_loss);
    tcase_add_test(tc, test_fit_draws_items_in_cpythons_shuffled_order);
    suite_add_tcase(s, tc);
    return s;
}
