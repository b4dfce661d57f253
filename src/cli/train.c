/*
 * train.c - `qkv train`: learn Wq, Wk, Wv and Wo on the coreference task,
 * log CSV, save a checkpoint, print a one-line summary.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "util/util.h"

typedef struct train_opts {
    int steps, batch, d_k, no_scale, quiet, log_every;
    double lr, momentum, init_std, clip, weight_decay;
    uint64_t seed;
    const char *optim, *levels, *log, *save;
    int threads; /* 0: QKV_THREADS or 1 */
} train_opts;

typedef struct trainer {
    const train_opts *o;
    qkv_coref_data data;
    qkv_coref_model *model;
    qkv_optim *opt;
    qkv_tape *tape;
    qkv_coref_batch *batch, *eval_batch;
    FILE *log;       /* part, while the run lasts: the log replaces o->log only */
    char part[4096]; /* after the checkpoint is saved, so the two always match */
    double loss_sum; /* over the steps since the last log row */
    int correct, seen;
} trainer;

static void trainer_free(trainer *tr)
{
    qkv_coref_data_free(&tr->data);
    qkv_coref_model_free(tr->model);
    qkv_optim_free(tr->opt);
    qkv_tape_free(tr->tape);
    qkv_coref_batch_free(tr->batch);
    qkv_coref_batch_free(tr->eval_batch);
    if (tr->log != NULL)
        cli_fclose(tr->log); /* and off the list a signal removes */
}

static int trainer_init(trainer *tr, const train_opts *o, unsigned levels, qkv_optim_kind kind)
{
    qkv_error err = qkv_error_none();
    tr->o = o;
    if (qkv_coref_data_build(&tr->data, levels, o->seed, &err) != QKV_OK)
        return cli_fail_status(err.status, "train: %s", err.message);
    qkv_coref_config mc = {qkv_coref_vocab_size(), o->d_k,      qkv_coref_classes(),
                           !o->no_scale,           o->init_std, o->seed};
    qkv_optim_config oc = qkv_optim_defaults(kind);
    oc.lr = o->lr;
    oc.momentum = o->momentum;
    oc.clip = o->clip;
    if (o->weight_decay >= 0)
        oc.weight_decay = o->weight_decay;
    if ((tr->model = qkv_coref_model_new(&mc, &err)) == NULL ||
        /* the list's optimizer: the same as one on the model's params
         * (each 2-D, so each decays), and its messages name them */
        (tr->opt = qkv_params_optim(tr->model->list, &oc, &err)) == NULL ||
        (tr->tape = qkv_tape_new(0, &err)) == NULL ||
        (tr->batch = qkv_coref_batch_new(o->batch, QKV_COREF_MAX_TOKENS, &err)) == NULL ||
        (tr->eval_batch = qkv_coref_batch_new(256, QKV_COREF_MAX_TOKENS, &err)) == NULL)
        return cli_fail_status(err.status, "train: %s", err.message);
    tr->model->levels = levels; /* saved, so that eval rebuilds these splits */
    if (snprintf(tr->part, sizeof tr->part, "%s.part", o->log) >= (int)sizeof tr->part)
        return cli_fail("train: the --log path is too long");
    /* a part left by a killed run goes; a symbolic link planted there is
     * removed, not written through, and one planted after that is refused
     * (the part is created exclusively) */
    if (unlink(tr->part) != 0 && errno != ENOENT) {
        cli_fail("train: cannot replace %s: %s", tr->part, strerror(errno));
        tr->part[0] = '\0'; /* not ours: no failed log to keep */
        return CLI_FAIL;
    }
    tr->log = cli_csv_create_new(tr->part,
                                 "step,train_loss,train_acc,val_loss,val_acc,attn_antecedent,"
                                 "gnorm_wq,gnorm_wk,gnorm_wv,gnorm_wo",
                                 &err);
    if (tr->log == NULL) {
        tr->part[0] = '\0';
        return cli_fail_status(err.status, "train: %s", err.message);
    }
    return CLI_OK;
}

/* After every update: accumulate the step's loss and accuracy, and every
 * log_every steps (and at the last) write a log row with the validation
 * scores and move the progress bar. */
static qkv_status log_step(void *ctx, const qkv_coref_step *s)
{
    trainer *tr = ctx;
    const train_opts *o = tr->o;
    qkv_coref_stats st;
    qkv_coref_stats_of(s->out, s->batch, &st);
    tr->loss_sum += st.loss;
    tr->correct += st.correct;
    tr->seen += st.items;
    if (s->step % o->log_every != 0 && s->step != o->steps)
        return QKV_OK;
    double gn[QKV_COREF_PARAMS];
    for (int i = 0; i < QKV_COREF_PARAMS; i++) /* of this step, before the update */
        gn[i] = qkv_grad_norm(&tr->model->params[i], 1);
    qkv_coref_eval val;
    qkv_status st_eval = qkv_coref_evaluate(tr->model, tr->tape, tr->eval_batch, tr->data.val,
                                            tr->data.n_val, 0, &val);
    if (st_eval != QKV_OK)
        return st_eval; /* the tape keeps the message */
    double tl = tr->loss_sum / (tr->seen / o->batch), ta = (double)tr->correct / tr->seen;
    cli_csv_printf(tr->log, "%d,%.6g,%.4f,%.6g,%.4f,%.4f,%.6g,%.6g,%.6g,%.6g\n", s->step,
                   cli_num(tl), cli_num(ta), cli_num(val.loss), cli_num(val.acc), cli_num(val.mass),
                   cli_num(gn[0]), cli_num(gn[1]), cli_num(gn[2]), cli_num(gn[3]));
    char status[96];
    snprintf(status, sizeof status, "loss %.4f acc %.3f val_acc %.3f", tl, ta, val.acc);
    cli_progress(o->quiet, s->step, o->steps, status, s->step == o->steps);
    tr->loss_sum = 0;
    tr->correct = tr->seen = 0;
    return QKV_OK;
}

/* The end of a diverged run's message: what became of the checkpoint and
 * the log, which only a run that ends well writes. A file that is there
 * was left untouched; one that is not was not written ("m.st was left
 * untouched and a.csv was not written"). Returns buf. */
static const char *outputs_kept(char *buf, size_t len, const train_opts *o)
{
    const int has_save = access(o->save, F_OK) == 0, has_log = access(o->log, F_OK) == 0;
    if (has_save && has_log)
        snprintf(buf, len, "%s and %s were left untouched", o->save, o->log);
    else if (has_save || has_log)
        snprintf(buf, len, "%s was left untouched and %s was not written",
                 has_save ? o->save : o->log, has_save ? o->log : o->save);
    else
        snprintf(buf, len, "neither %s nor %s was written", o->save, o->log);
    return buf;
}

/* Runs the loop. Returns CLI_OK, or CLI_FAIL after printing why. */
static int trainer_run(trainer *tr, const train_opts *o)
{
    qkv_error err = qkv_error_none();
    int done;
    /* the log needs each step's loss and accuracy alone (the validation
     * pass makes its own weights): the steps make the pronoun's rows only */
    tr->model->rows_only = 1;
    qkv_status s = qkv_coref_fit(tr->model, tr->opt, tr->tape, tr->batch, &tr->data, o->steps,
                                 o->seed + 1, log_step, tr, &done, &err);
    tr->model->rows_only = 0;
    if (s == QKV_ERR_NUMERIC) {
        char kept[2 * 4096 + 64];
        cli_progress(o->quiet, done + 1, o->steps, "", 1);
        return cli_fail("train: %s (try a smaller --lr); %s", err.message,
                        outputs_kept(kept, sizeof kept, o));
    }
    if (s != QKV_OK)
        return cli_fail_step("train", &err, tr->tape);
    return CLI_OK;
}

static int trainer_finish(trainer *tr, const train_opts *o, double seconds)
{
    qkv_error err = qkv_error_none();
    qkv_coref_eval tr_e, va_e, te_e;
    qkv_coref_model *m = tr->model;
    if (qkv_coref_evaluate(m, tr->tape, tr->eval_batch, tr->data.train, tr->data.n_train, 0,
                           &tr_e) != QKV_OK ||
        qkv_coref_evaluate(m, tr->tape, tr->eval_batch, tr->data.val, tr->data.n_val, 0, &va_e) !=
            QKV_OK ||
        qkv_coref_evaluate(m, tr->tape, tr->eval_batch, tr->data.test, tr->data.n_test, 0, &te_e) !=
            QKV_OK)
        return cli_fail_status(qkv_tape_status(tr->tape), "train: final evaluation: %s",
                               qkv_tape_error(tr->tape));
    /* the last update is checked by no later step: one too large leaves
     * finite weights whose scores overflow, and a model whose loss is NaN
     * is no model to save (the steps before it stop at a loss that is not
     * finite: qkv_coref_fit) */
    const struct {
        const qkv_coref_eval *e;
        const char *name;
    } splits[3] = {{&tr_e, "training"}, {&va_e, "validation"}, {&te_e, "test"}};
    char kept[2 * 4096 + 64];
    for (int i = 0; i < 3; i++)
        if (!isfinite(splits[i].e->loss))
            return cli_fail("train: diverged at step %d: after its update the loss on the %s "
                            "split is %s (try a smaller --lr); %s",
                            o->steps, splits[i].name, isnan(splits[i].e->loss) ? "NaN" : "infinite",
                            outputs_kept(kept, sizeof kept, o));
    if (cli_fclose(tr->log) != 0) {
        tr->log = NULL;
        return cli_fail("train: cannot write %s: %s", o->log, cli_csv_error());
    }
    tr->log = NULL;
    if (cli_mkdirs_for(o->save, &err) != QKV_OK ||
        qkv_coref_save(m, qkv_coref_fingerprint(), o->save, &err) != QKV_OK)
        return cli_fail_status(err.status, "train: %s", err.message);
    if (rename(tr->part, o->log) != 0)
        return cli_fail("train: cannot rename %s to %s: %s", tr->part, o->log, strerror(errno));
    tr->part[0] = '\0';
    if (!o->quiet) {
        fprintf(stderr, "trained in %.2f s; log ", seconds);
        cli_put_safe(stderr, o->log);
        fprintf(stderr, "; model ");
        cli_put_safe(stderr, o->save);
        fprintf(stderr, "\n");
    }
    printf("final: steps=%d loss=%.4g train_acc=%.4f val_acc=%.4f test_acc=%.4f "
           "attn_antecedent=%.4f\n",
           o->steps, tr_e.loss, tr_e.acc, va_e.acc, te_e.acc, te_e.mass);
    return CLI_OK;
}

int cmd_train(int argc, char **argv)
{
    train_opts o = {300,
                    32,
                    16,
                    0,
                    0,
                    5,
                    0.05,
                    0.0,
                    0.1,
                    0.0,
                    -1,
                    1,
                    "adam",
                    "1,2,3",
                    "out/train.csv",
                    CLI_DEFAULT_MODEL,
                    0};
    const cli_opt opts[] = {
        CLI_OPT_STEPS(&o.steps, "N: optimisation steps (default 300)"),
        CLI_OPT_BATCH(&o.batch, "N: sentences per step (default 32)"),
        CLI_OPT_LR(&o.lr, "X: learning rate (default 0.05)"),
        {"optim", OPT_STR, &o.optim, 0, 0, "NAME: sgd, adam or adamw (default adam)"},
        {"momentum", OPT_DOUBLE, &o.momentum, 0, 0.999,
         "X: momentum, with --optim sgd (default 0)"},
        CLI_OPT_CLIP(&o.clip, "X: clip the global gradient norm (0 = off)"),
        {"weight-decay", OPT_DOUBLE, &o.weight_decay, 0, 1, "X: weight decay (AdamW default 0.01)"},
        {"d-k", OPT_INT, &o.d_k, 1, QKV_COREF_MAX_DK, "N: width of Q, K and V (default 16)"},
        {"no-scale", OPT_FLAG, &o.no_scale, 0, 0, "do not divide scores by sqrt(d_k)"},
        CLI_OPT_INIT_STD(&o.init_std, "X: std of Wq, Wk, Wv at init (default 0.1)"),
        {"seed", OPT_U64, &o.seed, 0, 0, "N: seed for weights, splits, batches (default 1)"},
        {"levels", OPT_STR, &o.levels, 0, 0, "LIST: task levels, e.g. 1,2,3 (default) or 2"},
        {"log", OPT_FILE, &o.log, 0, 0, "FILE: CSV log (default out/train.csv)"},
        CLI_OPT_EVERY("log-every", &o.log_every, "N: steps between log rows (default 5)"),
        {"save", OPT_FILE, &o.save, 0, 0, "FILE: checkpoint (default out/coref.safetensors)"},
        CLI_OPT_THREADS(
            &o.threads,
            "N: threads for the attention items (default QKV_THREADS or 1; same results)"),
        {"quiet", OPT_FLAG, &o.quiet, 0, 0, "no progress bar or messages on stderr"},
    };
    int r = cli_parse(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]), "[options]",
                      "Trains Wq, Wk, Wv and Wo on the Chinese coreference task (他 -> 小明),\n"
                      "logs CSV, saves a checkpoint, and prints a final summary line.",
                      NULL, 0, NULL);
    if (r != CLI_OK)
        return r;
    /* the options' own errors first: a usage error exits 2 whatever the
     * files it names, as in the other commands */
    qkv_optim_kind kind;
    if (qkv_optim_parse(o.optim, &kind) != 0)
        return cli_usage_error("train", "--optim: '%s' is not sgd, adam or adamw", o.optim);
    if (o.momentum != 0 && kind != QKV_SGD) /* Adam's moments have no such knob */
        return cli_usage_error("train", "--momentum is for --optim sgd, not %s", o.optim);
    unsigned levels = qkv_coref_parse_levels(o.levels);
    if (levels == 0)
        return cli_usage_error("train", "--levels: '%s' is not a list of 1, 2, 3", o.levels);
    if (cli_same_file(o.log, o.save)) {
        cli_fail("train: --log and --save name the same file, %s: give two", o.save);
        return CLI_USAGE;
    }
    /* the log is written to LOG.part and a failed run's kept as
     * LOG.failed: a checkpoint at either name would be renamed over */
    for (int i = 0; i < 2; i++) {
        char side[4096 + 8];
        snprintf(side, sizeof side, "%s%s", o.log, i == 0 ? ".part" : ".failed");
        if (cli_same_file(side, o.save)) {
            cli_fail("train: --save %s is where train %s: give another file", o.save,
                     i == 0 ? "writes the log while it runs" : "keeps a failed run's log");
            return CLI_USAGE;
        }
    }
    /* both outputs are renamed into place after the run: refuse what a
     * rename must not replace (--log /dev/null) before it starts */
    qkv_error err = qkv_error_none();
    if (qkv_check_replaceable(o.log, &err) != QKV_OK ||
        qkv_check_replaceable(o.save, &err) != QKV_OK)
        return cli_fail_status(err.status, "train: %s", err.message);
    /* and a checkpoint that could not be written fails now, not after
     * the whole run; the log's directory is checked (found in the way,
     * or there and taking no new file) here too, so that its error names
     * the log and not the LOG.part file. Nothing is made yet: a run that
     * fails before it starts leaves no directory behind */
    char part[4096 + 8];
    snprintf(part, sizeof part, "%s.part", o.log);
    int missing;
    if (qkv_mkdirs_for_check(part, &missing, &err) != QKV_OK)
        return cli_fail_status(err.status, "train: %s", err.message);
    const char *slash = strrchr(o.log, '/'); /* "l.csv": ".", "/l.csv": "/" */
    const int n = slash == NULL || slash == o.log ? 1 : (int)(slash - o.log);
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", n, slash == NULL ? "." : o.log);
    if (!missing && access(dir, W_OK | X_OK) != 0)
        return cli_fail_status(QKV_ERR_IO, "train: cannot write %s: cannot create a file in %s: %s",
                               o.log, dir, strerror(errno));
    if (qkv_check_writable(o.save, &err) != QKV_OK)
        return cli_fail_status(err.status, "train: %s", err.message);
    if (o.threads > 0)
        qkv_threads_use(o.threads, NULL); /* the option's range is the function's */
    trainer tr;
    memset(&tr, 0, sizeof tr);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    r = trainer_init(&tr, &o, levels, kind);
    if (r == CLI_OK)
        r = trainer_run(&tr, &o);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (r == CLI_OK)
        r = trainer_finish(&tr, &o,
                           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec));
    trainer_free(&tr);
    if (r != CLI_OK && tr.part[0] != '\0' && access(tr.part, F_OK) == 0) {
        /* a failed run keeps its log beside the last good one, for a look */
        char failed[4096 + 8];
        snprintf(failed, sizeof failed, "%s.failed", o.log);
        if (rename(tr.part, failed) == 0)
            cli_fail("train: the failed run's log is %s%s%s", failed, /* escaped */
                     access(o.log, F_OK) == 0 ? "; the last good run's is " : "",
                     access(o.log, F_OK) == 0 ? o.log : "");
        else
            remove(tr.part);
    }
    return r;
}
