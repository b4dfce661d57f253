/*
 * saturation.c - `qkv saturation`: measure what the √d_k scaling does.
 *
 * For every d_k it trains a pair of models from the same initial weights on
 * the same batches, one with scores divided by √d_k and one without, and
 * logs softmax saturation (entropy, largest weight, Jacobian norm), score
 * variance and gradient norms. It also samples unit-variance q and k to
 * measure Var(q·k) directly against the tutorial's claim (d_k, and 1 after
 * scaling).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define MAX_DK 16
#define MAX_SEEDS CLI_MAX_SEEDS
#define VAR_SAMPLES 20000

typedef struct sat_opts {
    const char *dks, *optim, *out;
    int steps, seeds, batch, log_every, quiet;
    double lr, init_std;
    uint64_t seed;
    int threads;     /* 0: QKV_THREADS or 1 */
    int jobs;        /* worker processes for the runs */
    int no_variance; /* 1: no Var(q·k) table */
} sat_opts;

/* What one run contributes to the summary table. */
typedef struct run_result {
    double var0, entropy0, jacobian0; /* at initialisation; NAN if its first step diverged */
    int steps90;                      /* first logged step with val acc >= 0.9, -1 never */
    double final_acc;                 /* test accuracy at the end; NAN if diverged */
} run_result;

typedef struct sat_ctx {
    const sat_opts *o;
    qkv_optim_kind kind;
    qkv_coref_data data;
    qkv_tape *tape;
    qkv_coref_batch *batch, *eval_batch;
    FILE *csv;
} sat_ctx;

/* One run's state while it trains. */
typedef struct sat_run {
    sat_ctx *c;
    qkv_coref_model *m;
    int d_k, scaled;
    uint64_t seed;
    run_result *r;
    qkv_coref_eval val; /* of the weights after the updates the next row describes */
} sat_run;

/* Row `step` is logged: every log_every steps, and the last. */
static int logged(const sat_opts *o, int step)
{
    return step % o->log_every == 0 || step == o->steps - 1;
}

/* The validation scores of the weights as they are now, into run->val. */
static qkv_status measure_val(sat_run *run)
{
    sat_ctx *c = run->c;
    return qkv_coref_evaluate(run->m, c->tape, c->eval_batch, c->data.val, c->data.n_val, 0,
                              &run->val);
}

/* After every update: every log_every steps (and at the last), write a CSV
 * row from the step's attention and gradients. Steps are counted from 0
 * here: row `step` describes the weights after `step` updates, so the
 * forward pass and gradients of update step + 1 (this call's), and the
 * validation accuracy measured before that update: by the call before
 * (run_one for row 0), into run->val. This call then measures the
 * weights it leaves, if the next row is logged. (The accuracy used to be
 * measured here, after the update: one update later than its row.) */
static qkv_status log_step(void *ctx, const qkv_coref_step *s)
{
    sat_run *run = ctx;
    sat_ctx *c = run->c;
    const sat_opts *o = c->o;
    run_result *r = run->r;
    const int step = s->step - 1;
    /* the next step's forward pass makes every row of the scores and
     * weights only when that step is logged (step 0's is: as made) */
    run->m->rows_only = !logged(o, s->step);
    if (!logged(o, step))
        return s->step < o->steps && logged(o, s->step) ? measure_val(run) : QKV_OK;
    qkv_coref_stats st;
    qkv_coref_stats_of(s->out, s->batch, &st);
    double gs = qkv_grad_norm(&s->out->scores, 1);
    if (step == 0) {
        r->var0 = st.score_var;
        r->entropy0 = st.entropy;
        r->jacobian0 = st.jacobian;
    }
    qkv_coref_model *m = run->m;
    const qkv_coref_eval val = run->val;
    if (r->steps90 < 0 && val.acc >= 0.9)
        r->steps90 = step;
    fprintf(c->csv, "%d,%d,%llu,%d,%.6g,%.4f,%.4f,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g\n",
            run->d_k, run->scaled, (unsigned long long)run->seed, step, cli_num(st.loss),
            (double)st.correct / st.items, cli_num(val.acc), cli_num(qkv_grad_norm(&m->wq, 1)),
            cli_num(qkv_grad_norm(&m->wk, 1)), cli_num(qkv_grad_norm(&m->wv, 1)), cli_num(gs),
            cli_num(st.entropy), cli_num(st.max_weight), cli_num(st.jacobian),
            cli_num(st.score_var));
    /* the tape's outputs are read: the evaluation may reuse it */
    return s->step < o->steps && logged(o, s->step) ? measure_val(run) : QKV_OK;
}

/* Trains one model; logs rows; fills r. Returns CLI_OK or CLI_FAIL. A run
 * that diverges is one, said in the table; why goes to stderr, on a line
 * that starts with name. */
static int run_one(sat_ctx *c, int d_k, int scaled, uint64_t seed, const char *name, run_result *r)
{
    const sat_opts *o = c->o;
    qkv_error err = qkv_error_none();
    qkv_coref_config mc = {
        qkv_coref_vocab_size(), d_k, qkv_coref_classes(), scaled, o->init_std, seed};
    qkv_optim_config oc = qkv_optim_defaults(c->kind);
    oc.lr = o->lr;
    qkv_coref_model *m = qkv_coref_model_new(&mc, &err);
    /* over the list, which names each parameter in the optimizer's messages */
    qkv_optim *opt = m ? qkv_params_optim(m->list, &oc, &err) : NULL;
    if (opt == NULL) {
        qkv_coref_model_free(m);
        return cli_fail_status(err.status, "saturation: %s", err.message);
    }
    r->steps90 = -1;
    r->final_acc = NAN;
    /* row 0's, which log_step sets: a run whose first step diverged has
     * none (the optimizer refuses an update that overflows) */
    r->var0 = r->entropy0 = r->jacobian0 = NAN;
    sat_run run = {.c = c, .m = m, .d_k = d_k, .scaled = scaled, .seed = seed, .r = r};
    if (measure_val(&run) != QKV_OK) { /* row 0's: before the first update */
        qkv_optim_free(opt);
        qkv_coref_model_free(m);
        return cli_fail_status(qkv_tape_status(c->tape), "saturation: %s", qkv_tape_error(c->tape));
    }
    /* the same batches for the scaled and the unscaled run; a run that
     * diverges is reported as such, not as a failure */
    qkv_status s = qkv_coref_fit(m, opt, c->tape, c->batch, &c->data, o->steps, seed + 1, log_step,
                                 &run, NULL, &err);
    int rc =
        s == QKV_OK || s == QKV_ERR_NUMERIC ? CLI_OK : cli_fail_step("saturation", &err, c->tape);
    if (s == QKV_ERR_NUMERIC) /* a note: the sweep goes on */
        (void)cli_fail("%s: %s", name, err.message);
    qkv_coref_eval te;
    if (rc == CLI_OK && qkv_coref_evaluate(m, c->tape, c->eval_batch, c->data.test, c->data.n_test,
                                           0, &te) != QKV_OK)
        rc = cli_fail_status(qkv_tape_status(c->tape), "saturation: %s", qkv_tape_error(c->tape));
    if (rc == CLI_OK) {
        int finite = 1;
        for (int i = 0; i < QKV_COREF_PARAMS; i++)
            for (size_t j = 0; j < m->params[i]->numel; j++)
                finite &= isfinite(m->params[i]->data[j]);
        /* stopped by a loss or gradient that was not finite (the step
         * refused, the weights still finite), or weights gone infinite */
        r->final_acc = finite && s != QKV_ERR_NUMERIC ? te.acc : NAN;
    }
    qkv_optim_free(opt);
    qkv_coref_model_free(m);
    return rc;
}

/* "1.23" or "1.23±0.040": the mean by f (or to 3 significant digits, f
 * NULL), the sd to 2 significant digits, trailing zeros kept */
static const char *fmt_stat(char *buf, size_t len, const double *x, int n, const char *f)
{
    double m, sd;
    cli_mean_sd(x, n, &m, &sd);
    int used = f == NULL ? (int)strlen(cli_format_sig(buf, len, m, 3)) : snprintf(buf, len, f, m);
    if (n > 1 && used > 0 && (size_t)used + 3 < len) {
        memcpy(buf + used, "±", 2); /* U+00B1 is two bytes in UTF-8 */
        cli_format_sig(buf + used + 2, len - (size_t)used - 2, sd, 2);
    }
    return buf;
}

static const char *fmt_steps(char *buf, size_t len, const run_result *r, int n)
{
    double x[MAX_SEEDS];
    int reached = 0;
    for (int i = 0; i < n; i++)
        if (r[i].steps90 >= 0)
            x[reached++] = r[i].steps90;
    if (reached == 0)
        return snprintf(buf, len, "never"), buf;
    fmt_stat(buf, len, x, reached, "%.0f");
    if (reached < n) {
        size_t u = strlen(buf);
        snprintf(buf + u, len - u, " (%d/%d)", reached, n);
    }
    return buf;
}

static void print_summary(const sat_opts *o, const int *dks, int ndk,
                          run_result (*res)[2][MAX_SEEDS])
{
    static const char *heads[5] = {"score var at init", "entropy at init", "Jacobian at init",
                                   "steps to 90% val", "final test acc"};
    static const char *fmts[5] = {NULL, "%.3f", "%.4f", "", "%.3f"};
    printf("\n√d_k scaling on the coreference task: optimizer %s, lr %g, %d step%s, "
           "init std %g, %d seed(s)%s\n",
           o->optim, o->lr, o->steps, o->steps > 1 ? "s" : "", o->init_std, o->seeds,
           o->seeds > 1 ? " (mean±sd)" : "");
    printf("(each cell: scaled | unscaled; at init = before the first update)\n\n");
    /* every cell first, so that each column is as wide as its widest; in
     * a column, the scaled halves are as wide as the widest of them, so
     * that the bars between the halves line up */
    static char half[MAX_DK][5][2][40];
    int width[5], left[5] = {0};
    for (int col = 0; col < 5; col++)
        width[col] = cli_text_width(heads[col]);
    int diverged = 0; /* runs whose final_acc is NAN */
    int first = 0;    /* runs with no values at init: they diverged at their first step */
    for (int d = 0; d < ndk; d++) {
        for (int col = 0; col < 5; col++) {
            for (int s = 0; s < 2; s++) {
                char *cell = half[d][col][s];
                const size_t cap = sizeof half[d][col][s];
                const run_result *r = res[d][1 - s];
                double x[MAX_SEEDS];
                int n = 0;
                for (int i = 0; i < o->seeds; i++) {
                    x[n] = col == 0   ? r[i].var0
                           : col == 1 ? r[i].entropy0
                           : col == 2 ? r[i].jacobian0
                                      : r[i].final_acc;
                    /* a diverged run has no accuracy, nor values at
                     * init if it diverged at its first step */
                    n += col == 3 || !isnan(x[n]);
                }
                if (col == 4)
                    diverged += o->seeds - n;
                if (col == 0)
                    first += o->seeds - n;
                if (col == 3)
                    fmt_steps(cell, cap, r, o->seeds);
                else if (n == 0)
                    snprintf(cell, cap, col == 4 ? "diverged" : "-");
                else
                    fmt_stat(cell, cap, x, n, fmts[col]);
                if (n > 0 && n < o->seeds) {
                    size_t u = strlen(cell);
                    snprintf(cell + u, cap - u, " (%d/%d)", n, o->seeds);
                }
            }
            if (cli_text_width(half[d][col][0]) > left[col])
                left[col] = cli_text_width(half[d][col][0]);
        }
    }
    for (int d = 0; d < ndk; d++)
        for (int col = 0; col < 5; col++) {
            const int w = left[col] + 3 + cli_text_width(half[d][col][1]); /* " | " */
            width[col] = w > width[col] ? w : width[col];
        }
    /* the last column unpadded: no trailing spaces */
    printf("%5s", "d_k");
    for (int col = 0; col < 5; col++) {
        printf("  ");
        cli_print_padded(stdout, heads[col], col < 4 ? width[col] : 0);
    }
    printf("\n");
    for (int d = 0; d < ndk; d++) {
        printf("%5d", dks[d]);
        for (int col = 0; col < 5; col++) {
            printf("  ");
            cli_print_padded(stdout, half[d][col][0], left[col]);
            printf(" | ");
            cli_print_padded(stdout, half[d][col][1], col < 4 ? width[col] - left[col] - 3 : 0);
        }
        printf("\n");
    }
    if (diverged > 0)
        printf("\ndiverged: in %d run(s) the loss or a gradient stopped being finite, so they "
               "have no\nfinal accuracy (an (n/N) cell averages the n seeds that did not; try "
               "a smaller --lr)\n",
               diverged);
    if (first > 0)
        printf("%d of them diverged at their first step, and have no values at init either\n",
               first);
}

/* Var(q·k) of unit-variance vectors, unscaled and scaled, per d_k: the
 * table's text to out, then a NUL, then variance.csv's rows, which the
 * parent writes once the runs are whole (a task writes no file: in a
 * worker of --jobs it might outlive a failed sweep, or die half-way and
 * leave its temporary file). */
static int variance_table(const sat_opts *o, const int *dks, int ndk, FILE *out)
{
    char rows[MAX_DK][128];
    qkv_rng g;
    qkv_rng_seed(&g, o->seed);
    fprintf(out, "\nVar(q·k) for q, k with N(0,1) entries, %d samples per d_k\n\n", VAR_SAMPLES);
    fprintf(out, "%5s %12s %8s %16s %8s\n", "d_k", "Var(q·k)", "theory", "Var(q·k/√d_k)", "theory");
    for (int d = 0; d < ndk; d++) {
        double s = 0, ss = 0;
        for (int n = 0; n < VAR_SAMPLES; n++) {
            double dot = 0;
            for (int i = 0; i < dks[d]; i++)
                dot += qkv_rng_normalvariate(&g, 0, 1) * qkv_rng_normalvariate(&g, 0, 1);
            s += dot;
            ss += dot * dot;
        }
        double mean = s / VAR_SAMPLES, var = (ss - VAR_SAMPLES * mean * mean) / (VAR_SAMPLES - 1);
        fprintf(out, "%5d %12.3f %8d %16.4f %8d\n", dks[d], var, dks[d], var / dks[d], 1);
        snprintf(rows[d], sizeof rows[d], "%d,%.6g,%.6g,%d,1\n", dks[d], cli_num(var),
                 cli_num(var / dks[d]), dks[d]);
    }
    fputc('\0', out);
    for (int d = 0; d < ndk; d++)
        fputs(rows[d], out);
    return CLI_OK;
}

/* Writes the Var(q·k) table's rows (the task's text after its NUL) to
 * DIR/variance.csv. */
static int write_variance(const sat_opts *o, const char *rows)
{
    char path[4096];
    qkv_error err = qkv_error_none();
    cli_path_in(path, sizeof path, o->out, "variance.csv");
    FILE *f =
        cli_csv_create(path, "d_k,var_unscaled,var_scaled,theory_unscaled,theory_scaled", &err);
    if (f == NULL)
        return cli_fail_status(err.status, "saturation: %s", err.message);
    cli_csv_printf(f, "%s", rows);
    if (cli_csv_close(f, path) != 0)
        return cli_fail("saturation: cannot write %s: %s", path, cli_csv_error());
    return CLI_OK;
}

/* The sweep as tasks (cli_run_tasks): the runs in the serial order (seeds,
 * then d_k, then scaled before unscaled), each giving its CSV rows and
 * then its run_result; and last the Var(q·k) table, which is kept, and
 * printed after the summary once the files are written. */
typedef struct sweep_tasks {
    sat_ctx *c;
    const int *dks;
    int ndk, runs;
    FILE *csv; /* the real runs.csv */
    run_result (*res)[2][MAX_SEEDS];
    char *var_table; /* the Var(q·k) table's text, a NUL, variance.csv's rows; or NULL */
} sweep_tasks;

static void sweep_name(void *ctx, int task, char *buf, size_t len);

static int sweep_run(void *ctx, int task, FILE *out)
{
    sweep_tasks *w = ctx;
    if (task == w->runs)
        return variance_table(w->c->o, w->dks, w->ndk, out);
    const int s = task / (2 * w->ndk), d = task / 2 % w->ndk, scaled = task % 2 == 0;
    run_result r;
    char name[128];
    sweep_name(ctx, task, name, sizeof name);
    w->c->csv = out; /* log_step's rows */
    int rc = run_one(w->c, w->dks[d], scaled, w->c->o->seed + (uint64_t)s, name, &r);
    if (rc == CLI_OK && fwrite(&r, sizeof r, 1, out) != 1)
        rc = cli_fail_status(QKV_ERR_NOMEM, "saturation: out of memory");
    return rc;
}

/* A task's rough run time, in units of about 0.6 ms (seen on one core of
 * an Intel Xeon): a run of 300 steps at batch 32 costs 40 + d_k, and the
 * Var(q·k) table about 1.85 per unit of d_k over all d_k. */
static double sweep_cost(void *ctx, int task)
{
    const sweep_tasks *w = ctx;
    const sat_opts *o = w->c->o;
    if (task == w->runs) {
        double dims = 0;
        for (int d = 0; d < w->ndk; d++)
            dims += w->dks[d];
        return 1.85 * dims * (VAR_SAMPLES / 20000.0);
    }
    return (40.0 + w->dks[task / 2 % w->ndk]) * (o->steps / 300.0) * (o->batch / 32.0);
}

static void sweep_name(void *ctx, int task, char *buf, size_t len)
{
    const sweep_tasks *w = ctx;
    if (task == w->runs) {
        snprintf(buf, len, "saturation: the Var(q·k) table");
        return;
    }
    const int s = task / (2 * w->ndk), d = task / 2 % w->ndk, scaled = task % 2 == 0;
    snprintf(buf, len, "saturation: the %s run at d_k %d, seed %llu",
             scaled ? "scaled" : "unscaled", w->dks[d],
             (unsigned long long)(w->c->o->seed + (uint64_t)s));
}

static int sweep_collect(void *ctx, int task, const char *bytes, size_t len)
{
    sweep_tasks *w = ctx;
    if (task == w->runs) { /* printed later: the bar is still drawn here */
        if (memchr(bytes, '\0', len) == NULL)
            return cli_fail("saturation: the Var(q·k) table gave no rows");
        if ((w->var_table = malloc(len + 1)) == NULL)
            return cli_fail_status(QKV_ERR_NOMEM, "saturation: out of memory");
        memcpy(w->var_table, bytes, len);
        w->var_table[len] = '\0';
        return CLI_OK;
    }
    if (len < sizeof(run_result))
        return cli_fail("saturation: run %d gave no result", task);
    const int s = task / (2 * w->ndk), d = task / 2 % w->ndk, scaled = task % 2 == 0;
    memcpy(&w->res[d][scaled][s], bytes + len - sizeof(run_result), sizeof(run_result));
    cli_csv_write(w->csv, bytes, len - sizeof(run_result));
    return CLI_OK;
}

/* Runs the sweep into w (its res and var_table filled in) and writes
 * runs.csv's rows. */
static int sweep(sat_ctx *c, const int *dks, int ndk, sweep_tasks *w)
{
    const int runs = ndk * 2 * c->o->seeds;
    *w = (sweep_tasks){c, dks, ndk, runs, c->csv, w->res, NULL};
    const int with_var = !c->o->no_variance; /* the table is the last task */
    int r = cli_run_tasks(runs + with_var, c->o->jobs, sweep_run, sweep_collect, sweep_cost,
                          sweep_name, w, c->o->quiet, "runs");
    c->csv = w->csv;
    return r;
}

int cmd_saturation(int argc, char **argv)
{
    sat_opts o = {
        "4,16,64,256,512", "sgd", "out/saturation", 300, 1, 32, 10, 0, -1, 1.0, 1, 0, 1, 0};
    const cli_opt opts[] = {
        {"dk", OPT_STR, &o.dks, 0, 0, "LIST: d_k values (default 4,16,64,256,512)"},
        CLI_OPT_STEPS(&o.steps, "N: training steps per run (default 300)"),
        CLI_OPT_SEEDS(&o.seeds, "N: repeat every run with N seeds (default 1)"),
        {"optim", OPT_STR, &o.optim, 0, 0, "NAME: sgd (default) or adam"},
        CLI_OPT_LR(&o.lr, "X: learning rate (default 0.5 for sgd, 0.01 for adam)"),
        CLI_OPT_INIT_STD(&o.init_std, "X: std of Wq, Wk, Wv at init (default 1)"),
        CLI_OPT_BATCH(&o.batch, "N: sentences per step (default 32)"),
        CLI_OPT_EVERY("log-every", &o.log_every, "N: steps between CSV rows (default 10)"),
        {"seed", OPT_U64, &o.seed, 0, 0, "N: first seed (default 1)"},
        {"out", OPT_DIR, &o.out, 0, 0, "DIR: output directory (default out/saturation)"},
        CLI_OPT_THREADS(
            &o.threads,
            "N: threads for the attention items (default QKV_THREADS or 1; same results)"),
        CLI_OPT_JOBS(&o.jobs,
                     "N: worker processes for the runs (default 1; the same output on any N)"),
        {"no-variance", OPT_FLAG, &o.no_variance, 0, 0,
         "skip the Var(q·k) table (it depends only on --dk and --seed)"},
        {"quiet", OPT_FLAG, &o.quiet, 0, 0, "no progress bar"},
    };
    int r = cli_parse(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]), "[options]",
                      "Trains scaled and unscaled attention side by side at every d_k, from the\n"
                      "same weights on the same batches, and measures softmax saturation.\n"
                      "Writes DIR/runs.csv and DIR/variance.csv (not with --no-variance) and\n"
                      "prints summary tables.",
                      NULL, 0, NULL);
    if (r != CLI_OK)
        return r;
    if (o.threads > 0)
        qkv_threads_use(o.threads, NULL); /* the option's range is the function's */
    int dks[MAX_DK], ndk = cli_int_list(o.dks, dks, MAX_DK, 1, QKV_COREF_MAX_DK);
    if (ndk <= 0)
        return cli_usage_error("saturation",
                               "--dk: '%s' is not a list of up to %d distinct values of d_k "
                               "from 1 to %d",
                               o.dks, MAX_DK, QKV_COREF_MAX_DK);
    sat_ctx c;
    memset(&c, 0, sizeof c);
    c.o = &o;
    if (qkv_optim_parse(o.optim, &c.kind) != 0 || c.kind == QKV_ADAMW)
        return cli_usage_error("saturation", "--optim: '%s' is not sgd or adam", o.optim);
    if (o.lr < 0)
        o.lr = c.kind == QKV_SGD ? 0.5 : 0.01;
    char path[4096];
    qkv_error err = qkv_error_none();
    /* variance.csv is written after the runs: fail now if it cannot be */
    cli_path_in(path, sizeof path, o.out, "variance.csv");
    if (!o.no_variance && cli_csv_check(path, &err) != QKV_OK)
        return cli_fail_status(err.status, "saturation: %s", err.message);
    cli_path_in(path, sizeof path, o.out, "runs.csv");
    c.csv = cli_csv_create(path,
                           "d_k,scaled,seed,step,loss,acc,val_acc,gnorm_wq,gnorm_wk,"
                           "gnorm_wv,gnorm_scores,entropy,max_weight,jacobian,score_var",
                           &err);
    if (c.csv == NULL)
        return cli_fail_status(err.status, "saturation: %s", err.message);
    if ((c.tape = qkv_tape_new(0, &err)) == NULL ||
        (c.batch = qkv_coref_batch_new(o.batch, QKV_COREF_MAX_TOKENS, &err)) == NULL ||
        (c.eval_batch = qkv_coref_batch_new(256, QKV_COREF_MAX_TOKENS, &err)) == NULL ||
        qkv_coref_data_build(&c.data, QKV_COREF_ALL_LEVELS, o.seed, &err) != QKV_OK)
        r = cli_fail_status(err.status, "saturation: %s", err.message);
    static run_result res[MAX_DK][2][MAX_SEEDS];
    sweep_tasks w = {.res = res};
    if (r == CLI_OK)
        r = sweep(&c, dks, ndk, &w);
    if (cli_csv_end(c.csv, path, r == CLI_OK) != 0 && r == CLI_OK)
        r = cli_fail("saturation: cannot write %s: %s", path, cli_csv_error());
    if (r == CLI_OK && w.var_table != NULL)
        r = write_variance(&o, w.var_table + strlen(w.var_table) + 1);
    if (r == CLI_OK) { /* the tables of a sweep whose files are whole */
        print_summary(&o, dks, ndk, res);
        if (w.var_table != NULL)
            fputs(w.var_table, stdout);
    }
    free(w.var_table);
    if (r == CLI_OK) {
        char variance[4096];
        printf("\nwrote ");
        cli_put_safe(stdout, path);
        if (!o.no_variance) {
            printf(" and ");
            cli_put_safe(stdout, cli_path_in(variance, sizeof variance, o.out, "variance.csv"));
        }
        printf("\n");
    }
    qkv_coref_batch_free(c.batch);
    qkv_coref_batch_free(c.eval_batch);
    qkv_tape_free(c.tape);
    qkv_coref_data_free(&c.data);
    return r;
}
