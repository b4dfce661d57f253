/*
 * ablate.c - `qkv ablate`: the tutorial's open questions answered by
 * taking one piece away at a time (see apps/coref/ablate.h). Why V? Why
 * two matrices for Q and K? Why e? Every variant trains with the same
 * data, batches, optimizer and steps, over several seeds.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define MAX_VARIANTS 16
#define MAX_SEEDS CLI_MAX_SEEDS
#define ROLES_TEST QKV_ROLES_HELD_OUT

typedef struct ablate_opts {
    const char *task, *variants, *out;
    int seeds, steps, batch, d_k, eval_every, quiet, threads, jobs;
    double lr;
    uint64_t seed;
} ablate_opts;

typedef struct run_result {
    double acc, antecedent, self, loss;
    double train; /* accuracy (roles: both right) on the training items */
    int steps90;
    size_t params;
    int n_curve;
    double *curve; /* validation loss at every eval_every steps */
} run_result;

/* One run's context for the curve log. */
typedef struct runlog {
    FILE *curves;
    const char *variant;
    uint64_t seed;
} runlog;

static double *curve_alloc(const ablate_opts *o, int *n)
{
    *n = o->steps / o->eval_every;
    return calloc((size_t)(*n > 0 ? *n : 1), sizeof(double));
}

/* Says that a run diverged at step, with the optimizer's account of the
 * gradient when it refused the step (the loss, finite then, of the step);
 * CLI_FAIL. */
static int diverged(const char *variant, uint64_t seed, int step, const qkv_optim *opt, double loss)
{
    const char *why = qkv_coref_refusal(opt, loss);
    return cli_fail("ablate: %s, seed %llu: diverged at step %d%s%s (try a smaller --lr)", variant,
                    (unsigned long long)seed, step, why[0] != '\0' ? ": " : "", why);
}

/* ---- the coreference task ------------------------------------------------ */

static int coref_run(const ablate_opts *o, const char *variant, uint64_t seed, qkv_tape *t,
                     qkv_coref_batch *b, qkv_coref_batch *eb, const runlog *log, run_result *r)
{
    qkv_error err = qkv_error_none();
    qkv_coref_data d = {0};
    qkv_ablate_config c = {0};
    qkv_ablate_parse(variant, &c);
    c.vocab = qkv_coref_vocab_size();
    c.classes = qkv_coref_classes();
    c.d_k = o->d_k;
    c.seed = seed;
    qkv_ablate_model *m = NULL;
    qkv_optim *opt = NULL;
    int *order = NULL;
    int rc = CLI_OK;
    /* the data and the batches are `qkv train --seed S`'s: the splits from
     * S, the batch order from S + 1 */
    if (qkv_coref_data_build(&d, QKV_COREF_ALL_LEVELS, seed, &err) != QKV_OK ||
        (m = qkv_ablate_model_new(&c, &err)) == NULL) {
        rc = cli_fail_status(err.status, "ablate: %s", err.message);
        goto done;
    }
    qkv_optim_config oc = qkv_optim_defaults(QKV_ADAM);
    oc.lr = o->lr;
    if ((opt = qkv_params_optim(m->list, &oc, &err)) == NULL) {
        rc = cli_fail_status(err.status, "ablate: %s", err.message);
        goto done;
    }
    for (int i = 0; i < qkv_params_count(m->list); i++)
        qkv_optim_set_lr_scale(opt, i, qkv_ablate_lr_scale(m, i));
    r->params = qkv_params_numel(m->list);
    r->curve = curve_alloc(o, &r->n_curve);
    order = malloc(sizeof *order * (size_t)d.n_train);
    if (r->curve == NULL || order == NULL) {
        rc = cli_fail_status(QKV_ERR_NOMEM, "ablate: out of memory");
        goto done;
    }
    for (int i = 0; i < d.n_train; i++)
        order[i] = i;
    qkv_rng g;
    qkv_rng_seed(&g, seed + 1);
    int pos = 0;
    double train_loss = 0;
    int since = 0;
    r->steps90 = -1;
    for (int step = 1; step <= o->steps && rc == CLI_OK; step++) {
        qkv_ablate_out f;
        qkv_coref_draw_batch(&g, b, d.train, order, d.n_train, &pos);
        qkv_status s = qkv_ablate_train_step(m, opt, t, b, &f);
        if (s == QKV_ERR_NUMERIC) {
            rc = diverged(variant, seed, step, opt, (double)f.f.loss->data[0]);
            break;
        }
        if (s != QKV_OK) {
            rc = cli_fail_status(qkv_tape_status(t), "ablate: %s: %s", variant, qkv_tape_error(t));
            break;
        }
        train_loss += f.f.loss->data[0];
        since++;
        if (step % o->eval_every != 0)
            continue;
        qkv_ablate_eval val;
        if (qkv_ablate_evaluate(m, t, eb, d.val, d.n_val, &val) != QKV_OK) {
            rc = cli_fail_status(qkv_tape_status(t), "ablate: %s", qkv_tape_error(t));
            break;
        }
        r->curve[step / o->eval_every - 1] = val.loss;
        if (r->steps90 < 0 && val.acc >= 0.9)
            r->steps90 = step;
        fprintf(log->curves, "%s,%llu,%d,%.6g,%.6g,%.4f\n", log->variant,
                (unsigned long long)log->seed, step, cli_num(train_loss / since), cli_num(val.loss),
                cli_num(val.acc));
        train_loss = 0;
        since = 0;
    }
    if (rc == CLI_OK) {
        qkv_ablate_eval test = {0}, tr = {0};
        if (qkv_ablate_evaluate(m, t, eb, d.test, d.n_test, &test) != QKV_OK)
            rc = cli_fail_status(qkv_tape_status(t), "ablate: %s", qkv_tape_error(t));
        r->acc = test.acc;
        r->loss = test.loss;
        if (rc == CLI_OK && qkv_ablate_evaluate(m, t, eb, d.train, d.n_train, &tr) != QKV_OK)
            rc = cli_fail_status(qkv_tape_status(t), "ablate: %s", qkv_tape_error(t));
        r->train = tr.acc;
        r->antecedent = test.antecedent;
        r->self = test.self;
    }
done:
    free(order);
    qkv_optim_free(opt);
    qkv_ablate_model_free(m);
    qkv_coref_data_free(&d);
    return rc;
}

/* ---- the roles task ------------------------------------------------------ */

static int roles_run(const ablate_opts *o, const char *variant, uint64_t seed, qkv_tape *t,
                     const runlog *log, run_result *r)
{
    qkv_error err = qkv_error_none();
    qkv_roles_kind kind;
    qkv_roles_parse(variant, &kind);
    int pairs[QKV_ROLES_PAIRS], batch[CLI_MAX_BATCH];
    qkv_roles_split(seed + 1, pairs); /* the held-out pairs first */
    qkv_rng g;
    qkv_rng_seed(&g, seed + 2);
    const int *test = pairs, *train = pairs + ROLES_TEST;
    const int n_train = QKV_ROLES_PAIRS - ROLES_TEST;
    int order[QKV_ROLES_PAIRS], pos = 0;
    for (int i = 0; i < n_train; i++)
        order[i] = train[i];
    qkv_roles_model *m = qkv_roles_model_new(kind, seed, &err);
    qkv_optim_config oc = qkv_optim_defaults(QKV_ADAM);
    oc.lr = o->lr;
    qkv_optim *opt = m != NULL ? qkv_params_optim(m->list, &oc, &err) : NULL;
    int rc = CLI_OK;
    if (opt == NULL)
        rc = cli_fail_status(err.status, "ablate: %s", err.message);
    else if ((r->curve = curve_alloc(o, &r->n_curve)) == NULL)
        rc = cli_fail_status(QKV_ERR_NOMEM, "ablate: out of memory");
    if (rc == CLI_OK)
        r->params = qkv_params_numel(m->list);
    r->steps90 = -1;
    double train_loss = 0;
    int since = 0;
    for (int step = 1; step <= o->steps && rc == CLI_OK; step++) {
        for (int i = 0; i < o->batch; i++) {
            if (pos == 0)
                qkv_rng_shuffle(&g, order, (size_t)n_train, sizeof *order);
            batch[i] = order[pos];
            pos = (pos + 1) % n_train;
        }
        double loss;
        qkv_status s = qkv_roles_train_step(m, opt, t, batch, o->batch, &loss);
        if (s == QKV_ERR_NUMERIC) {
            rc = diverged(variant, seed, step, opt, loss);
            break;
        }
        if (s != QKV_OK) {
            rc = cli_fail_status(qkv_tape_status(t), "ablate: %s: %s", variant, qkv_tape_error(t));
            break;
        }
        train_loss += loss;
        since++;
        if (step % o->eval_every != 0)
            continue;
        double both, test_loss;
        qkv_tensor *la, *lb;
        const int old = qkv_tape_set_grad(t, 0);
        qkv_tape_reset(t);
        qkv_tensor *tl = qkv_roles_forward(m, t, test, ROLES_TEST, &la, &lb);
        qkv_tape_set_grad(t, old);
        test_loss = qkv_tape_status(t) == QKV_OK ? (double)tl->data[0] : NAN;
        if (qkv_tape_status(t) != QKV_OK ||
            qkv_roles_accuracy(m, t, test, ROLES_TEST, NULL, NULL, &both) != QKV_OK) {
            rc = cli_fail_status(qkv_tape_status(t), "ablate: %s", qkv_tape_error(t));
            break;
        }
        r->curve[step / o->eval_every - 1] = test_loss;
        if (r->steps90 < 0 && both >= 0.9)
            r->steps90 = step;
        fprintf(log->curves, "%s,%llu,%d,%.6g,%.6g,%.4f\n", log->variant,
                (unsigned long long)log->seed, step, cli_num(train_loss / since),
                cli_num(test_loss), cli_num(both));
        train_loss = 0;
        since = 0;
    }
    /* the roles task has no attention target: antecedent is the share of
     * held-out sentences whose A is right, self the share whose B is */
    if (rc == CLI_OK &&
        (qkv_roles_accuracy(m, t, test, ROLES_TEST, &r->antecedent, &r->self, &r->acc) != QKV_OK ||
         qkv_roles_accuracy(m, t, train, n_train, NULL, NULL, &r->train) != QKV_OK))
        rc = cli_fail_status(qkv_tape_status(t), "ablate: %s", qkv_tape_error(t));
    qkv_optim_free(opt);
    qkv_roles_model_free(m);
    return rc;
}

/* ---- the report ---------------------------------------------------------- */

/* RMS over seeds and evaluation points of the difference between two
 * variants' validation-loss curves; seed_shift pairs seed s of a with seed
 * s + shift of b (0: the same seed). NAN when there is nothing to pair. */
static double curve_rms(run_result *a, run_result *b, int seeds, int shift)
{
    double ss = 0;
    long n = 0;
    for (int s = 0; s + shift < seeds; s++)
        for (int i = 0; i < a[s].n_curve; i++) {
            double d = a[s].curve[i] - b[s + shift].curve[i];
            ss += d * d;
            n++;
        }
    return n ? sqrt(ss / (double)n) : NAN;
}

static int find(const char *const *names, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return i;
    return -1;
}

static void print_report(const ablate_opts *o, int roles, const char *const *names, int nv,
                         run_result (*res)[MAX_SEEDS])
{
    char dk[32] = ""; /* the coref layer's width: --d-k */
    if (!roles)
        snprintf(dk, sizeof dk, "; d_k %d", o->d_k);
    printf("\n%s: Adam lr %g, %d step%s of %d, %d seed%s from %llu%s\n\n",
           roles ? "Two roles, two heads (「A喜欢B。」: who likes, who is liked)"
                 : "Coreference (他 -> 小明), test split: templates never trained on",
           o->lr, o->steps, o->steps > 1 ? "s" : "", o->batch, o->seeds, o->seeds > 1 ? "s" : "",
           (unsigned long long)o->seed, dk);
    printf("%-18s %7s %15s %9s %10s %10s %7s\n", "variant", "params",
           roles ? "both right" : "test acc", "to 90%", roles ? "A right" : "attn->name",
           roles ? "B right" : "attn->self", "train");
    for (int v = 0; v < nv; v++) {
        double acc[MAX_SEEDS], ante[MAX_SEEDS], self[MAX_SEEDS], m, sd, ma, sa, ms, ss;
        double steps = 0, train = 0;
        int got = 0;
        for (int s = 0; s < o->seeds; s++) {
            acc[s] = res[v][s].acc;
            ante[s] = res[v][s].antecedent;
            self[s] = res[v][s].self;
            train += res[v][s].train / o->seeds;
            if (res[v][s].steps90 >= 0)
                steps += res[v][s].steps90, got++;
        }
        cli_mean_sd(acc, o->seeds, &m, &sd);
        cli_mean_sd(ante, o->seeds, &ma, &sa);
        cli_mean_sd(self, o->seeds, &ms, &ss);
        char cell[32];
        if (got == 0)
            snprintf(cell, sizeof cell, "never");
        else if (got < o->seeds)
            snprintf(cell, sizeof cell, "%.0f(%d/%d)", steps / got, got, o->seeds);
        else
            snprintf(cell, sizeof cell, "%.0f", steps / got);
        printf("%-18s %7zu %9.3f±%.3f %9s %10.3f %10.3f %7.3f\n", names[v], res[v][0].params, m, sd,
               cell, ma, ms, train);
    }
    if (roles)
        return;
    const int full = find(names, nv, "full");
    if (full < 0)
        return;
    const double noise = curve_rms(res[full], res[full], o->seeds, 1);
    int any = 0;
    for (int v = 0; v < nv; v++) {
        if (strncmp(names[v], "base-", 5) != 0)
            continue;
        if (!any++) {
            printf("\nValidation-loss curves against full's (base e), same seed: RMS difference\n");
            if (isnan(noise))
                printf("(with one seed there is no seed-to-seed difference to compare with)\n");
            else
                printf("(seed-to-seed RMS difference of full's own curves: %.4f)\n", noise);
        }
        printf("  %-18s %.2e\n", names[v], curve_rms(res[v], res[full], o->seeds, 0));
    }
}

static int write_runs(const ablate_opts *o, const char *const *names, int nv,
                      run_result (*res)[MAX_SEEDS], int roles)
{
    char path[4096];
    qkv_error err = qkv_error_none();
    cli_path_in(path, sizeof path, o->out, "runs.csv");
    FILE *f = cli_csv_create(path,
                             roles ? "variant,seed,params,test_both,steps_to_90,test_a,test_b,"
                                     "train_both"
                                   : "variant,seed,params,test_acc,steps_to_90,attn_antecedent,"
                                     "attn_self,test_loss,train_acc",
                             &err);
    if (f == NULL)
        return cli_fail_status(err.status, "ablate: %s", err.message);
    for (int v = 0; v < nv; v++)
        for (int s = 0; s < o->seeds; s++) {
            const run_result *r = &res[v][s];
            cli_csv_printf(f, "%s,%llu,%zu,%.4f,%d,%.4f,%.4f", names[v],
                           (unsigned long long)(o->seed + (uint64_t)s), r->params, cli_num(r->acc),
                           r->steps90, cli_num(r->antecedent), cli_num(r->self));
            if (!roles)
                cli_csv_printf(f, ",%.6g", cli_num(r->loss));
            cli_csv_printf(f, ",%.4f\n", cli_num(r->train));
        }
    if (cli_csv_close(f, path) != 0)
        return cli_fail("ablate: cannot write %s: %s", path, cli_csv_error());
    /* summary.csv: per variant, means over the seeds (sd of the accuracy) */
    cli_path_in(path, sizeof path, o->out, "summary.csv");
    f = cli_csv_create(path,
                       roles ? "variant,params,seeds,both_mean,both_sd,steps_to_90_mean,"
                               "steps_to_90_sd,reached,a_mean,b_mean"
                             : "variant,params,seeds,acc_mean,acc_sd,steps_to_90_mean,"
                               "steps_to_90_sd,reached,attn_antecedent_mean,attn_self_mean",
                       &err);
    if (f == NULL)
        return cli_fail_status(err.status, "ablate: %s", err.message);
    for (int v = 0; v < nv; v++) {
        double acc[MAX_SEEDS], steps[MAX_SEEDS], m, sd, sm = -1, ssd = 0, a = 0, b = 0;
        int reached = 0;
        for (int s = 0; s < o->seeds; s++) {
            acc[s] = res[v][s].acc;
            a += res[v][s].antecedent / o->seeds;
            b += res[v][s].self / o->seeds;
            if (res[v][s].steps90 >= 0)
                steps[reached++] = res[v][s].steps90;
        }
        cli_mean_sd(acc, o->seeds, &m, &sd);
        if (reached > 0)
            cli_mean_sd(steps, reached, &sm, &ssd);
        cli_csv_printf(f, "%s,%zu,%d,%.4f,%.4f,%.1f,%.1f,%d,%.4f,%.4f\n", names[v],
                       res[v][0].params, o->seeds, cli_num(m), cli_num(sd), cli_num(sm),
                       cli_num(ssd), reached, cli_num(a), cli_num(b));
    }
    if (cli_csv_close(f, path) != 0)
        return cli_fail("ablate: cannot write %s: %s", path, cli_csv_error());
    return CLI_OK;
}

/* Splits a comma-separated list of the task's variant names: the count, or
 * -1 for an unknown or repeated name. names point into buf. */
static int parse_variants(const char *s, int roles, char *buf, size_t len, const char **names)
{
    char *item[MAX_VARIANTS];
    const int n = cli_split_list(s, buf, len, item, MAX_VARIANTS);
    for (int i = 0; i < n; i++) {
        qkv_ablate_config c;
        qkv_roles_kind k;
        if ((roles ? qkv_roles_parse(item[i], &k) : qkv_ablate_parse(item[i], &c)) != 0 ||
            find(names, i, item[i]) >= 0)
            return -1;
        names[i] = item[i];
    }
    return n;
}

/* The runs as tasks (cli_run_tasks), in the serial order (seeds, then
 * variants); each gives its curve rows, then its curve, then its
 * run_result (whose curve pointer the collector replaces). */
typedef struct ablate_tasks {
    const ablate_opts *o;
    const char *const *names;
    int nv, roles;
    qkv_tape *t;
    qkv_coref_batch *b, *eb;
    FILE *curves;
    run_result (*res)[MAX_SEEDS];
} ablate_tasks;

static int ablate_task(void *ctx, int task, FILE *out)
{
    const ablate_tasks *w = ctx;
    const int v = task % w->nv, s = task / w->nv;
    const uint64_t seed = w->o->seed + (uint64_t)s;
    const runlog log = {out, w->names[v], seed};
    run_result x;
    memset(&x, 0, sizeof x);
    int r = w->roles ? roles_run(w->o, w->names[v], seed, w->t, &log, &x)
                     : coref_run(w->o, w->names[v], seed, w->t, w->b, w->eb, &log, &x);
    if (r == CLI_OK && ((x.n_curve > 0 && fwrite(x.curve, sizeof *x.curve, (size_t)x.n_curve,
                                                 out) != (size_t)x.n_curve) ||
                        fwrite(&x, sizeof x, 1, out) != 1))
        r = cli_fail_status(QKV_ERR_NOMEM, "ablate: out of memory");
    free(x.curve);
    return r;
}

static void ablate_name(void *ctx, int task, char *buf, size_t len)
{
    const ablate_tasks *w = ctx;
    snprintf(buf, len, "ablate: the run of %s, seed %llu", w->names[task % w->nv],
             (unsigned long long)(w->o->seed + (uint64_t)(task / w->nv)));
}

static int ablate_collect(void *ctx, int task, const char *bytes, size_t len)
{
    const ablate_tasks *w = ctx;
    run_result *x = &w->res[task % w->nv][task / w->nv];
    if (len < sizeof *x)
        return cli_fail("ablate: run %d gave no result", task);
    memcpy(x, bytes + len - sizeof *x, sizeof *x);
    const size_t nc = x->n_curve > 0 ? (size_t)x->n_curve : 0, cb = nc * sizeof(double);
    x->curve = NULL;
    if (len < sizeof *x + cb || (x->curve = calloc(nc > 0 ? nc : 1, sizeof(double))) == NULL)
        return cli_fail("ablate: run %d gave no curve", task);
    memcpy(x->curve, bytes + len - sizeof *x - cb, cb);
    cli_csv_write(w->curves, bytes, len - sizeof *x - cb);
    return CLI_OK;
}

int cmd_ablate(int argc, char **argv)
{
    ablate_opts o = {"coref", NULL, NULL, 3, -1, 32, -1, 0, 0, 0, 1, 0.01, 1};
    const cli_opt opts[] = {
        {"task", OPT_STR, &o.task, 0, 0, "NAME: coref (default) or roles"},
        {"variants", OPT_STR, &o.variants, 0, 0,
         "LIST: variants to train (default: all the task's)"},
        CLI_OPT_SEEDS(&o.seeds, "N: seeds per variant (default 3)"),
        CLI_OPT_STEPS(&o.steps, "N: steps per run (default 300; roles 600)"),
        CLI_OPT_BATCH(&o.batch, "N: sentences per step (default 32)"),
        CLI_OPT_LR(&o.lr, "X: Adam's learning rate (default 0.01)"),
        {"d-k", OPT_INT, &o.d_k, 1, QKV_COREF_MAX_DK, "N: coref's width of Q, K, V (default 16)"},
        CLI_OPT_EVERY("eval-every", &o.eval_every,
                      "N: steps between validations, for the curves and steps to 90% (default 10, "
                      "at most --steps)"),
        {"seed", OPT_U64, &o.seed, 0, 0, "N: first seed (default 1)"},
        {"out", OPT_DIR, &o.out, 0, 0, "DIR: output directory (default out/ablate[-roles])"},
        CLI_OPT_THREADS(&o.threads, "N: threads (default QKV_THREADS or 1)"),
        CLI_OPT_JOBS(&o.jobs,
                     "N: worker processes for the runs (default 1; the same results on any N)"),
        {"quiet", OPT_FLAG, &o.quiet, 0, 0, "no progress bar"},
    };
    int r = cli_parse(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]), "[options]",
                      "Trains the attention layer with one piece changed at a time, with the\n"
                      "same data, batches, optimizer and steps, and compares them.\n"
                      "coref variants (the tutorial's task, 他 -> 小明):\n"
                      "  full              softmax(Q·Kᵀ/√d_k)·V, as qkv train\n"
                      "  no-v              softmax(Q·Kᵀ/√d_k)·X: no Wv\n"
                      "  shared-qk         Wk = Wq: one matrix, symmetric scores\n"
                      "  shared-qk-noself  the same, each token barred from attending to itself\n"
                      "  bilinear          S = X·M·Xᵀ with one vocab×vocab matrix M\n"
                      "  base-2, base-10   softmax in base b: b^S/Σb^S\n"
                      "  base-2-matched,   the same, with Wq, Wk started and trained at\n"
                      "  base-10-matched   1/√(ln b) of full's size and rate\n"
                      "roles variants (「A喜欢B。」, two heads, d_model 32; name both A and B):\n"
                      "  full              each head's V writes 16 of the 32 output columns\n"
                      "  no-v              each head returns X's rows; the heads are added\n"
                      "  no-v-concat       the same, concatenated: 64 columns\n"
                      "Writes DIR/runs.csv (one row per variant and seed; steps_to_90 is -1\n"
                      "when validation never reached 0.9), DIR/summary.csv (means over the\n"
                      "seeds) and DIR/curves.csv (variant,seed,step,train_loss,val_loss,\n"
                      "val_acc every --eval-every steps; roles: val is the held-out pairs).",
                      NULL, 0, NULL);
    if (r != CLI_OK)
        return r;
    int roles = strcmp(o.task, "roles") == 0;
    if (!roles && strcmp(o.task, "coref") != 0)
        return cli_usage_error("ablate", "--task: '%s' is neither coref nor roles", o.task);
    if (roles && o.d_k > 0) /* its heads are d_model/2 = 16 wide, fixed */
        return cli_usage_error("ablate", "--d-k is for --task coref; the roles task's widths "
                                         "are fixed");
    if (o.d_k < 0)
        o.d_k = 16;
    if (o.steps < 0)
        o.steps = roles ? 600 : 300;
    if (o.out == NULL)
        o.out = roles ? "out/ablate-roles" : "out/ablate";
    if (o.eval_every == 0) /* not given: the default, within a short run */
        o.eval_every = o.steps < 10 ? o.steps : 10;
    if (o.eval_every > o.steps)
        return cli_usage_error("ablate", "--eval-every %d is more than --steps %d", o.eval_every,
                               o.steps);
    const char *const *all = roles ? qkv_roles_names : qkv_ablate_names;
    const int n_all = roles ? QKV_ROLES_VARIANTS : QKV_ABLATE_VARIANTS;
    const char *names[MAX_VARIANTS];
    char buf[512];
    int nv;
    if (o.variants == NULL) {
        for (nv = 0; nv < n_all; nv++)
            names[nv] = all[nv];
    } else if ((nv = parse_variants(o.variants, roles, buf, sizeof buf, names)) < 0) {
        char known[256] = "";
        for (int i = 0; i < n_all; i++)
            snprintf(known + strlen(known), sizeof known - strlen(known), i ? ", %s" : "%s",
                     all[i]);
        return cli_usage_error("ablate",
                               "--variants: '%s' is not a list of distinct %s variants: %s",
                               o.variants, o.task, known);
    }
    if (o.threads > 0)
        qkv_threads_use(o.threads, NULL);
    qkv_error err = qkv_error_none();
    char path[4096];
    /* runs.csv and summary.csv are written after the runs: fail now if
     * they cannot be */
    static const char *const later[] = {"runs.csv", "summary.csv"};
    for (size_t i = 0; i < sizeof later / sizeof later[0]; i++) {
        cli_path_in(path, sizeof path, o.out, later[i]);
        if (cli_csv_check(path, &err) != QKV_OK)
            return cli_fail_status(err.status, "ablate: %s", err.message);
    }
    cli_path_in(path, sizeof path, o.out, "curves.csv");
    FILE *curves = cli_csv_create(path, "variant,seed,step,train_loss,val_loss,val_acc", &err);
    if (curves == NULL)
        return cli_fail_status(err.status, "ablate: %s", err.message);
    qkv_tape *t = qkv_tape_new(0, &err);
    qkv_coref_batch *b =
        t && !roles ? qkv_coref_batch_new(o.batch, QKV_COREF_MAX_TOKENS, &err) : NULL;
    qkv_coref_batch *eb = b ? qkv_coref_batch_new(256, QKV_COREF_MAX_TOKENS, &err) : NULL;
    if (t == NULL || (!roles && eb == NULL))
        r = cli_fail_status(err.status, "ablate: %s", err.message);
    static run_result res[MAX_VARIANTS][MAX_SEEDS];
    memset(res, 0, sizeof res);
    ablate_tasks w = {&o, names, nv, roles, t, b, eb, curves, res};
    if (r == CLI_OK)
        r = cli_run_tasks(nv * o.seeds, o.jobs, ablate_task, ablate_collect, NULL, ablate_name, &w,
                          o.quiet, "runs");
    if (cli_csv_end(curves, path, r == CLI_OK) != 0 && r == CLI_OK)
        r = cli_fail("ablate: cannot write %s: %s", path, cli_csv_error());
    if (r == CLI_OK)
        r = write_runs(&o, names, nv, res, roles);
    if (r == CLI_OK) {
        print_report(&o, roles, names, nv, res);
        char other[4096];
        printf("\nwrote ");
        cli_put_safe(stdout, cli_path_in(other, sizeof other, o.out, "runs.csv"));
        printf(", ");
        cli_put_safe(stdout, cli_path_in(other, sizeof other, o.out, "summary.csv"));
        printf(" and ");
        cli_put_safe(stdout, path);
        printf("\n");
    }
    for (int v = 0; v < nv; v++)
        for (int s = 0; s < o.seeds; s++)
            free(res[v][s].curve);
    qkv_coref_batch_free(b);
    qkv_coref_batch_free(eb);
    qkv_tape_free(t);
    return r;
}
