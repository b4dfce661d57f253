/*
 * test_coref_seq.c - the RNN chapter's sentences and models: distance
 * sentences have the distance asked for and tokenize back to their ids;
 * the RNN model computes h_t = tanh(W_x[x_t] + h_{t-1}·W_h + b) and reads
 * the state at each item's pronoun (checked against loops in double); the
 * attention kind is the coreference model.
 */
#include <stdlib.h>
#include <string.h>

#include "tests.h"

#ifdef QKV_DOUBLE
#define SEQ_TOL 1e-12
#else
#define SEQ_TOL 2e-5 /* 30 steps of tanh(·) with sums of 28 terms of order 0.2 */
#endif

START_TEST(test_distance_sentences_have_the_distance_asked_for_and_tokenize)
{
    qkv_rng g;
    qkv_rng_seed(&g, 3);
    static const int ks[] = {0, 1, 2, 3, 4, 7, 16, 33, 64, 257, QKV_DISTANCE_MAX};
    static int ids[QKV_DISTANCE_MAX + 8], back[QKV_DISTANCE_MAX + 8];
    static char text[8 * (QKV_DISTANCE_MAX + 8)];
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        const int k = ks[i];
        int len, pron, target;
        ck_assert_int_eq(qkv_distance_sentence(k, &g, ids, &len, &pron, &target, NULL), QKV_OK);
        ck_assert_int_eq(len, k + 8);
        ck_assert_int_eq(pron, k + QKV_DISTANCE_BASE); /* k fillers + 今天 跑步 ， */
        /* the name first, its class the target, the pronoun of its gender */
        ck_assert_int_eq(qkv_coref_class_of(ids[0]), target);
        const char *want = qkv_coref_kind(ids[0]) == QKV_COREF_MALE ? "他" : "她";
        ck_assert_str_eq(qkv_coref_word(ids[pron]), want);
        /* no other name or pronoun anywhere */
        for (int j = 1; j < len; j++)
            if (j != pron)
                ck_assert(qkv_coref_class_of(ids[j]) < 0 &&
                          qkv_coref_kind(ids[j]) != QKV_COREF_HE &&
                          qkv_coref_kind(ids[j]) != QKV_COREF_SHE);
        /* the text, joined, tokenizes back to the same ids (short ones:
         * the tokenizer takes QKV_COREF_MAX_TOKENS) */
        if (len <= QKV_COREF_MAX_TOKENS) {
            text[0] = '\0';
            for (int j = 0; j < len; j++)
                strcat(text, qkv_coref_word(ids[j]));
            int n;
            qkv_error err = qkv_error_none();
            ck_assert_msg(qkv_coref_tokenize(text, back, QKV_COREF_MAX_TOKENS, &n, &err) == QKV_OK,
                          "%s: %s", text, err.message);
            ck_assert_int_eq(n, len);
            ck_assert(memcmp(ids, back, sizeof(int) * (size_t)n) == 0);
        }
    }
    /* the first sentences, as text: odd k puts 也 before 跑步 */
    qkv_rng_seed(&g, 1);
    int len, pron, target;
    qkv_distance_sentence(3, &g, ids, &len, &pron, &target, NULL);
    text[0] = '\0';
    for (int j = 0; j < len; j++)
        strcat(text, qkv_coref_word(ids[j]));
    ck_assert_msg(strstr(text, "今天也跑步，") != NULL && strstr(text, "很爱") != NULL, "%s", text);
    qkv_error err = qkv_error_none();
    ck_assert_int_eq(qkv_distance_sentence(-1, &g, ids, &len, &pron, &target, &err), QKV_ERR_ARG);
    ck_assert_int_eq(
        qkv_distance_sentence(QKV_DISTANCE_MAX + 1, &g, ids, &len, &pron, &target, &err),
        QKV_ERR_ARG);
}
END_TEST

/* The logits of the RNN model for batch b, computed here in double. */
static void ref_rnn_logits(const qkv_seq_model *m, const qkv_coref_batch *b, double *logits)
{
    const int H = m->cfg.width, C = m->cfg.classes;
    double *h = calloc((size_t)H, sizeof *h), *next = calloc((size_t)H, sizeof *next);
    for (int i = 0; i < b->B; i++) {
        memset(h, 0, sizeof *h * (size_t)H);
        for (int t = 0; t <= b->query[i]; t++) {
            const int id = b->ids[(size_t)i * b->cap_t + t];
            for (int j = 0; j < H; j++) {
                double s = (double)m->rnn.wx->data[(size_t)id * H + j] + (double)m->rnn.b->data[j];
                for (int c = 0; t > 0 && c < H; c++)
                    s += h[c] * (double)m->rnn.wh->data[(size_t)c * H + j];
                next[j] = tanh(s);
            }
            memcpy(h, next, sizeof *h * (size_t)H);
        }
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int j = 0; j < H; j++)
                s += h[j] * (double)m->wo->data[(size_t)j * C + c];
            logits[i * C + c] = s;
        }
    }
    free(h);
    free(next);
}

START_TEST(test_the_rnn_model_reads_the_state_at_each_pronoun)
{
    qkv_seq_config c = {QKV_SEQ_RNN,
                        qkv_coref_vocab_size(),
                        qkv_coref_classes(),
                        qkv_seq_default_width(QKV_SEQ_RNN),
                        QKV_RNN_TANH,
                        5,
                        NAN};
    qkv_seq_model *m = qkv_seq_model_new(&c, NULL);
    ck_assert_ptr_nonnull(m);
    ck_assert_uint_eq(qkv_params_numel(m->list), 2520); /* 49·28 + 28² + 28 + 28·12 */
    /* items of different distances in one batch: pronouns at 4, 9, 30 */
    qkv_coref_batch *b = qkv_coref_batch_new(3, 40, NULL);
    qkv_rng g;
    qkv_rng_seed(&g, 2);
    static const int ks[3] = {0, 5, 26};
    for (int i = 0; i < 3; i++) {
        int ids[64], len, pron, target;
        qkv_distance_sentence(ks[i], &g, ids, &len, &pron, &target, NULL);
        ck_assert_int_eq(qkv_coref_batch_add(b, ids, len, pron, target, ids[0]), QKV_OK);
    }
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_seq_out out;
    ck_assert_int_eq(qkv_seq_forward(m, t, b, &out), QKV_OK);
    ck_assert_int_eq(out.steps, b->T);
    double want[3 * 12];
    ref_rnn_logits(m, b, want);
    for (int i = 0; i < 3 * 12; i++)
        ASSERT_NEAR(out.logits->data[i], want[i], SEQ_TOL);
    /* after backward, the states past every pronoun have no gradient and
     * the one at the last pronoun has */
    ck_assert_int_eq(qkv_backward(t, out.loss), QKV_OK);
    ck_assert(qkv_grad_norm(&out.h[b->T - 1], 1) == 0);
    ck_assert(qkv_grad_norm(&out.h[30], 1) > 0);
    qkv_tape_free(t);
    qkv_coref_batch_free(b);
    qkv_seq_model_free(m);
}
END_TEST

START_TEST(test_every_kind_trains_on_one_batch_and_attention_is_the_coref_model)
{
    qkv_coref_batch *b = qkv_coref_batch_new(16, 16, NULL);
    qkv_rng g;
    qkv_rng_seed(&g, 4);
    ck_assert_int_eq(qkv_distance_batch(b, 16, 2, &g, NULL), QKV_OK);
    qkv_tape *t = qkv_tape_new(0, NULL);
    for (int k = QKV_SEQ_ATTENTION; k <= QKV_SEQ_GRU; k++) {
        qkv_seq_config c = {(qkv_seq_kind)k,
                            qkv_coref_vocab_size(),
                            qkv_coref_classes(),
                            qkv_seq_default_width((qkv_seq_kind)k),
                            QKV_RNN_TANH,
                            9,
                            1.0};
        qkv_seq_model *m = qkv_seq_model_new(&c, NULL);
        ck_assert_ptr_nonnull(m);
        /* about 2.5k parameters each, as seq.h says */
        ck_assert_msg(qkv_params_numel(m->list) >= 2400 && qkv_params_numel(m->list) <= 2700,
                      "%s: %zu", qkv_seq_name(c.kind), qkv_params_numel(m->list));
        if (k == QKV_SEQ_LSTM) /* the forget gate's bias, the second quarter of b */
            ck_assert(m->lstm.b->data[m->cfg.width] == 1 && m->lstm.b->data[0] != 1);
        qkv_optim_config oc = qkv_optim_defaults(QKV_ADAM);
        oc.lr = 0.02;
        qkv_optim *o = qkv_params_optim(m->list, &oc, NULL);
        qkv_seq_out out;
        double first = 0, last = 0;
        for (int s = 0; s < 60; s++) {
            ck_assert_int_eq(qkv_seq_train_step(m, o, t, b, &out), QKV_OK);
            *(s == 0 ? &first : &last) = (double)out.loss->data[0];
        }
        /* one batch, learned by heart: the loss falls by half or more */
        ck_assert_msg(last < 0.5 * first, "%s: loss %g -> %g", qkv_seq_name(c.kind), first, last);
        if (k == QKV_SEQ_ATTENTION) { /* the same numbers as the coreference model's forward */
            qkv_coref_out f;
            qkv_tape_reset(t);
            ck_assert_int_eq(qkv_coref_forward(m->attn, t, b, &f), QKV_OK);
            double l = (double)f.loss->data[0];
            qkv_tape_reset(t);
            ck_assert_int_eq(qkv_seq_forward(m, t, b, &out), QKV_OK);
            ck_assert((double)out.loss->data[0] == l);
            ck_assert_ptr_null(qkv_seq_recurrent_weight(m));
        } else {
            ck_assert_ptr_nonnull(qkv_seq_recurrent_weight(m));
        }
        qkv_optim_free(o);
        qkv_seq_model_free(m);
    }
    qkv_tape_free(t);
    qkv_coref_batch_free(b);
}
END_TEST

/* qkv_coref_diverged says why a training step stopped, naming the
 * parameter whose update the optimizer refused, for the RNN models as for
 * the coreference model's fit (the RNN experiments said nothing, or the
 * tape's error, empty). Adam at lr 1e308 takes a step of lr/(1 - 0.9),
 * beyond the largest double, which leaves no weight finite, the first
 * parameter's first among them; a loss that is not finite (the next step's,
 * from those weights) stops the step before the optimizer, and is said as
 * such. */
START_TEST(test_a_diverged_seq_step_is_named)
{
    qkv_coref_batch *b = qkv_coref_batch_new(16, 16, NULL);
    qkv_rng g;
    qkv_rng_seed(&g, 4);
    ck_assert_int_eq(qkv_distance_batch(b, 16, 2, &g, NULL), QKV_OK);
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_seq_config c = {QKV_SEQ_RNN,
                        qkv_coref_vocab_size(),
                        qkv_coref_classes(),
                        qkv_seq_default_width(QKV_SEQ_RNN),
                        QKV_RNN_TANH,
                        9,
                        1.0};
    qkv_seq_model *m = qkv_seq_model_new(&c, NULL);
    qkv_optim_config oc = qkv_optim_defaults(QKV_ADAM);
    qkv_optim *o = qkv_params_optim(m->list, &oc, NULL);
    qkv_seq_out out;
    ck_assert_int_eq(qkv_seq_train_step(m, o, t, b, &out), QKV_OK);
    ck_assert_int_eq(qkv_optim_set_lr(o, 1e308), QKV_OK);
    ck_assert_int_eq(qkv_seq_train_step(m, o, t, b, &out), QKV_ERR_NUMERIC);
    qkv_error err = qkv_error_none();
    ck_assert_int_eq(qkv_coref_diverged(&err, 2, o, (double)out.loss->data[0]), QKV_ERR_NUMERIC);
    ck_assert_int_eq(err.status, QKV_ERR_NUMERIC);
    const char *first;
    qkv_params_at(m->list, 0, &first);
    char want[128];
    snprintf(want, sizeof want,
             "diverged at step 2: the update of %s is not finite: data[0] = ", first);
    ck_assert_msg(strncmp(err.message, want, strlen(want)) == 0, "%s", err.message);
    static const char tail[] = ", from finite gradients; every parameter was updated";
    ck_assert_msg(strlen(err.message) > strlen(tail) &&
                      strcmp(err.message + strlen(err.message) - strlen(tail), tail) == 0,
                  "%s", err.message);
    ck_assert_int_eq(qkv_seq_train_step(m, o, t, b, &out), QKV_ERR_NUMERIC);
    ck_assert(!isfinite(out.loss->data[0]));
    err = qkv_error_none();
    ck_assert_int_eq(qkv_coref_diverged(&err, 3, o, (double)out.loss->data[0]), QKV_ERR_NUMERIC);
    ck_assert_str_eq(err.message, "diverged at step 3: the loss or a gradient is not finite");
    ck_assert_int_eq(qkv_coref_diverged(NULL, 3, o, 1), QKV_ERR_NUMERIC); /* err may be NULL */
    qkv_optim_free(o);
    qkv_seq_model_free(m);
    qkv_tape_free(t);
    qkv_coref_batch_free(b);
}
END_TEST

/* A batch of distance sentences marks each item's name (the antecedent,
 * token 0) and refuses, naming the length, a batch whose rows are one
 * token short: k fillers make k + 8 tokens. */
START_TEST(test_distance_batches_mark_the_name_and_need_k_plus_8_tokens)
{
    qkv_rng g;
    qkv_rng_seed(&g, 5);
    qkv_coref_batch *b = qkv_coref_batch_new(4, 10, NULL);
    ck_assert_int_eq(qkv_distance_batch(b, 4, 2, &g, NULL), QKV_OK);
    ck_assert_int_eq(b->T, 10);
    for (int i = 0; i < b->B; i++) {
        ck_assert_int_eq(b->mark[i], b->ids[(size_t)i * b->cap_t]);
        ck_assert_int_eq(qkv_coref_class_of(b->mark[i]), b->target[i]);
    }
    qkv_error err = qkv_error_none();
    ck_assert_int_eq(qkv_distance_batch(b, 4, 3, &g, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "distance: 4 sentences of 11 tokens do not fit the batch");
    qkv_coref_batch_free(b);
}
END_TEST

/* Equal logits go to the first class, as torch.argmax and
 * qkv_coref_predict have it: with Wo all zero every logit is 0, and items
 * whose target is class 0 are all right. */
START_TEST(test_seq_correct_gives_ties_to_the_first_class)
{
    qkv_seq_config c = {QKV_SEQ_GRU,
                        qkv_coref_vocab_size(),
                        qkv_coref_classes(),
                        qkv_seq_default_width(QKV_SEQ_GRU),
                        QKV_RNN_TANH,
                        3,
                        NAN};
    qkv_seq_model *m = qkv_seq_model_new(&c, NULL);
    ck_assert_ptr_nonnull(m);
    memset(m->wo->data, 0, sizeof *m->wo->data * m->wo->numel);
    qkv_coref_batch *b = qkv_coref_batch_new(3, 12, NULL);
    qkv_rng g;
    qkv_rng_seed(&g, 6);
    for (int i = 0; i < 3; i++) {
        int ids[16], len, pron, target;
        qkv_distance_sentence(i, &g, ids, &len, &pron, &target, NULL);
        ck_assert_int_eq(qkv_coref_batch_add(b, ids, len, pron, i == 2 ? 11 : 0, ids[0]), QKV_OK);
    }
    qkv_tape *t = qkv_tape_new(0, NULL);
    ck_assert_int_eq(qkv_seq_correct(m, t, b), 2);
    qkv_tape_free(t);
    qkv_coref_batch_free(b);
    qkv_seq_model_free(m);
}
END_TEST

Suite *coref_seq_suite(void)
{
    Suite *s = suite_create("coref_seq");
    TCase *tc = tcase_create("seq");
    tcase_add_test(tc, test_distance_sentences_have_the_distance_asked_for_and_tokenize);
    tcase_add_test(tc, test_the_rnn_model_reads_the_state_at_each_pronoun);
    tcase_add_test(tc, test_every_kind_trains_on_one_batch_and_attention_is_the_coref_model);
    tcase_add_test(tc, test_distance_batches_mark_the_name_and_need_k_plus_8_tokens);
    tcase_add_test(tc, test_a_diverged_seq_step_is_named);
    tcase_add_test(tc, test_seq_correct_gives_ties_to_the_first_class);
    suite_add_tcase(s, tc);
    return s;
}
