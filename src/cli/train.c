/*
 * train.c - `qkv train`: learn Wq, Wk, Wv and Wo on the coreference task,
 * log CSV, save a checkpoint, print a one-line summary.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

typedef struct train_opts {
    int steps, batch, d_k, no_scale, quiet, log_every;
    double lr, momentum, init_std, clip, weight_decay;
    uint64_t seed;
    const char *optim, *levels, *log, *save;
    int threads; /* 0: QKV_THREADS or 1 */
} train_opts;

typedef struct trainer {
    qkv_dataset data;
    qkv_model *model;
    qkv_optim *opt;
    qkv_tape *tape;
    qkv_batch *batch, *eval_batch;
    int *order;
    FILE *log;
} trainer;

static void trainer_free(trainer *tr)
{
    qkv_dataset_free(&tr->data);
    qkv_model_free(tr->model);
    qkv_optim_free(tr->opt);
    qkv_tape_free(tr->tape);
    qkv_batch_free(tr->batch);
    qkv_batch_free(tr->eval_batch);
    free(tr->order);
    if (tr->log != NULL)
        fclose(tr->log);
}

static int trainer_init(trainer *tr, const train_opts *o, unsigned levels, qkv_optim_kind kind)
{
    char err[512];
    if (qkv_dataset_build(&tr->data, levels, o->seed) != QKV_OK || tr->data.n_train == 0)
        return cli_fail("train: cannot build the data set");
    qkv_model_config mc = {qkv_vocab_size(), o->d_k, qkv_coref_classes(), !o->no_scale,
                           o->init_std, o->seed};
    qkv_optim_config oc = qkv_optim_defaults(kind);
    oc.lr = o->lr;
    oc.momentum = o->momentum;
    oc.clip = o->clip;
    if (o->weight_decay >= 0)
        oc.weight_decay = o->weight_decay;
    tr->model = qkv_model_new(&mc);
    tr->opt = tr->model ? qkv_optim_new(&oc, tr->model->params, QKV_MODEL_PARAMS) : NULL;
    tr->tape = qkv_tape_new(0);
    tr->batch = qkv_batch_new(o->batch, QKV_MAX_TOKENS);
    tr->eval_batch = qkv_batch_new(256, QKV_MAX_TOKENS);
    tr->order = malloc(sizeof *tr->order * (size_t)tr->data.n_train);
    if (!tr->model || !tr->opt || !tr->tape || !tr->batch || !tr->eval_batch || !tr->order)
        return cli_fail("train: out of memory");
    for (int i = 0; i < tr->data.n_train; i++)
        tr->order[i] = i;
    tr->log = qkv_csv_create(o->log,
                             "step,train_loss,train_acc,val_loss,val_acc,attn_antecedent,"
                             "gnorm_wq,gnorm_wk,gnorm_wv,gnorm_wo",
                             err, sizeof err);
    if (tr->log == NULL)
        return cli_fail("train: %s", err);
    return CLI_OK;
}

/* Runs the loop. Returns CLI_OK, or CLI_FAIL after printing why. */
static int trainer_run(trainer *tr, const train_opts *o)
{
    qkv_rng g;
    qkv_rng_seed(&g, o->seed + 1);
    int pos = 0, correct = 0, seen = 0;
    double loss_sum = 0;
    char status[96];
    for (int step = 1; step <= o->steps; step++) {
        qkv_forward f;
        task_next_batch(&g, tr->batch, tr->data.train, tr->order, tr->data.n_train, &pos);
        qkv_status s = qkv_model_train_step(tr->model, tr->opt, tr->tape, tr->batch, &f);
        if (s == QKV_ERR_NUMERIC) {
            cli_progress(o->quiet, step, o->steps, "", 1);
            return cli_fail("train: diverged at step %d: the loss or a gradient is not finite "
                            "(try a smaller --lr); %s was left untouched", step, o->save);
        }
        if (s != QKV_OK)
            return cli_fail("train: step %d: %s", step, qkv_tape_error(tr->tape));
        qkv_attn_stats st;
        qkv_attn_stats_of(&f, tr->batch, &st);
        loss_sum += st.loss;
        correct += st.correct;
        seen += st.items;
        if (step % o->log_every != 0 && step != o->steps)
            continue;
        double gn[QKV_MODEL_PARAMS];
        for (int i = 0; i < QKV_MODEL_PARAMS; i++) /* of this step, before the update */
            gn[i] = qkv_grad_norm(&tr->model->params[i], 1);
        task_eval val;
        task_evaluate(tr->model, tr->tape, tr->eval_batch, tr->data.val, tr->data.n_val, 0, &val);
        double tl = loss_sum / (seen / o->batch), ta = (double)correct / seen;
        fprintf(tr->log, "%d,%.6f,%.4f,%.6f,%.4f,%.4f,%.6g,%.6g,%.6g,%.6g\n", step, tl, ta,
                val.loss, val.acc, val.mass, gn[0], gn[1], gn[2], gn[3]);
        snprintf(status, sizeof status, "loss %.4f acc %.3f val_acc %.3f", tl, ta, val.acc);
        cli_progress(o->quiet, step, o->steps, status, step == o->steps);
        loss_sum = 0;
        correct = seen = 0;
    }
    return CLI_OK;
}

static int trainer_finish(trainer *tr, const train_opts *o, double seconds)
{
    char err[512];
    task_eval tr_e, va_e, te_e;
    qkv_model *m = tr->model;
    task_evaluate(m, tr->tape, tr->eval_batch, tr->data.train, tr->data.n_train, 0, &tr_e);
    task_evaluate(m, tr->tape, tr->eval_batch, tr->data.val, tr->data.n_val, 0, &va_e);
    task_evaluate(m, tr->tape, tr->eval_batch, tr->data.test, tr->data.n_test, 0, &te_e);
    if (fclose(tr->log) != 0) {
        tr->log = NULL;
        return cli_fail("train: cannot finish writing %s", o->log);
    }
    tr->log = NULL;
    if (qkv_mkdirs_for(o->save, err, sizeof err) != QKV_OK ||
        qkv_model_save(m, qkv_vocab_fingerprint(), o->save, err, sizeof err) != QKV_OK)
        return cli_fail("train: %s", err);
    if (!o->quiet)
        fprintf(stderr, "trained in %.2f s; log %s; model %s\n", seconds, o->log, o->save);
    printf("final: steps=%d loss=%.4f train_acc=%.4f val_acc=%.4f test_acc=%.4f "
           "attn_antecedent=%.4f\n",
           o->steps, tr_e.loss, tr_e.acc, va_e.acc, te_e.acc, te_e.mass);
    return CLI_OK;
}

int cmd_train(int argc, char **argv)
{
    train_opts o = {300, 32, 16, 0, 0, 5, 0.05, 0.0, 0.1, 0.0, -1, 1,
                    "adam", "1,2,3", "out/train.csv", CLI_DEFAULT_MODEL, 0};
    const cli_opt opts[] = {
        {"steps", OPT_INT, &o.steps, 1, 1e7, "N: optimisation steps (default 300)"},
        {"batch", OPT_INT, &o.batch, 1, 4096, "N: sentences per step (default 32)"},
        {"lr", OPT_DOUBLE, &o.lr, 1e-12, 1e300, "X: learning rate (default 0.05)"},
        {"optim", OPT_STR, &o.optim, 0, 0, "NAME: sgd, adam or adamw (default adam)"},
        {"momentum", OPT_DOUBLE, &o.momentum, 0, 0.999, "X: SGD momentum (default 0)"},
        {"clip", OPT_DOUBLE, &o.clip, 0, 1e12, "X: clip the global gradient norm (0 = off)"},
        {"weight-decay", OPT_DOUBLE, &o.weight_decay, 0, 1, "X: weight decay (AdamW default 0.01)"},
        {"d-k", OPT_INT, &o.d_k, 1, 4096, "N: width of Q, K and V (default 16)"},
        {"no-scale", OPT_FLAG, &o.no_scale, 0, 0, "do not divide scores by sqrt(d_k)"},
        {"init-std", OPT_DOUBLE, &o.init_std, 0, 100, "X: std of Wq, Wk, Wv at init (default 0.1)"},
        {"seed", OPT_U64, &o.seed, 0, 4294967295.0, "N: seed for weights, splits, batches (default 1)"},
        {"levels", OPT_STR, &o.levels, 0, 0, "LIST: task levels, e.g. 1,2,3 (default) or 2"},
        {"log", OPT_STR, &o.log, 0, 0, "FILE: CSV log (default out/train.csv)"},
        {"log-every", OPT_INT, &o.log_every, 1, 1e7, "N: steps between log rows (default 5)"},
        {"save", OPT_STR, &o.save, 0, 0, "FILE: checkpoint (default out/coref.qkv)"},
        {"threads", OPT_INT, &o.threads, 1, 64,
         "N: threads for the attention items (default QKV_THREADS or 1; same results)"},
        {"quiet", OPT_FLAG, &o.quiet, 0, 0, "no progress bar or messages on stderr"},
    };
    int r = cli_parse(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]), "[options]",
                      "Trains Wq, Wk, Wv and Wo on the Chinese coreference task (他 -> 小明),\n"
                      "logs CSV, saves a checkpoint, and prints a final summary line.",
                      NULL, 0, NULL);
    if (r != CLI_OK)
        return r;
    if (o.threads > 0)
        qkv_threads_use(o.threads);
    qkv_optim_kind kind;
    if (qkv_optim_parse(o.optim, &kind) != 0)
        return cli_usage_error("train", "--optim: '%s' is not sgd, adam or adamw", o.optim);
    unsigned levels = qkv_parse_levels(o.levels);
    if (levels == 0)
        return cli_usage_error("train", "--levels: '%s' is not a list of 1, 2, 3", o.levels);
    trainer tr;
    memset(&tr, 0, sizeof tr);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    r = trainer_init(&tr, &o, levels, kind);
    if (r == CLI_OK)
        r = trainer_run(&tr, &o);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (r == CLI_OK)
        r = trainer_finish(&tr, &o, (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec));
    trainer_free(&tr);
    return r;
}
