/*
 * distance.c - `qkv distance`: the tutorial's first claim about RNNs (§2),
 * measured. Each model learns the coreference task with k neutral filler
 * tokens between the name and its pronoun, for every k and seed, with the
 * same optimizer, steps and batches; the table shows where each one stops
 * remembering the name.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

#define MAX_ITEMS 16 /* models, distances */
#define MAX_SEEDS CLI_MAX_SEEDS
#define VAL_N 256
#define TEST_N 512

/* The held-out sentences scored at a time, for sentences of up to T
 * tokens: 128, fewer where the attention's T×T scores of 128 sentences
 * would take more than 128 MB (2^25 numbers in float, 2^24 in double),
 * whatever --batch is (at distance 4096, 128 took 17 GB). Each sentence
 * is scored alone, so the accuracy is the same in any number of parts. */
static int eval_capacity(int tokens)
{
    const long fit = (long)((1UL << 27) / sizeof(qkv_real)) / ((long)tokens * tokens);
    return fit < 1 ? 1 : fit > 128 ? 128 : (int)fit;
}

typedef struct dist_opts {
    const char *models, *distances, *out;
    int seeds, steps, batch, eval_every, quiet, threads, jobs;
    double lr, clip, forget_bias;
    uint64_t seed;
} dist_opts;

typedef struct dist_result {
    double acc, seconds;
    int steps90;
    int diverged; /* the loss or a gradient stopped being finite */
} dist_result;

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Accuracy of m over n sentences of k fillers drawn from seed, in batches
 * of the eval batch's capacity. -1 after an error. */
static double accuracy(qkv_seq_model *m, qkv_tape *t, qkv_coref_batch *eb, int n, int k,
                       uint64_t seed)
{
    qkv_rng g;
    qkv_rng_seed(&g, seed);
    int right = 0;
    for (int done = 0; done < n; done += eb->cap_b) {
        int part = n - done < eb->cap_b ? n - done : eb->cap_b;
        if (qkv_distance_batch(eb, part, k, &g, NULL) != QKV_OK)
            return -1;
        int r = qkv_seq_correct(m, t, eb);
        if (r < 0)
            return -1;
        right += r;
    }
    return (double)right / n;
}

/* Seeds of the data: the training batches and the held-out sets depend on
 * the run's seed and k, never on the model, so every model sees the same
 * sentences. */
static uint64_t data_seed(uint64_t seed, int k, int which)
{
    return seed * 1000003u + (uint64_t)k * 101u + (uint64_t)which;
}

/* Trains one model at distance k; fills r. CLI_OK or CLI_FAIL. A run that
 * diverges is one, said in the table; why goes to stderr, on a line that
 * starts with name. */
static int run_one(const dist_opts *o, qkv_seq_kind kind, int k, uint64_t seed, qkv_tape *t,
                   qkv_coref_batch *b, qkv_coref_batch *eb, const char *name, dist_result *r)
{
    qkv_error err = qkv_error_none();
    qkv_seq_config c = {kind,
                        qkv_coref_vocab_size(),
                        qkv_coref_classes(),
                        qkv_seq_default_width(kind),
                        QKV_RNN_TANH,
                        seed,
                        o->forget_bias};
    qkv_seq_model *m = qkv_seq_model_new(&c, &err);
    qkv_optim_config oc = qkv_optim_defaults(QKV_ADAM);
    oc.lr = o->lr;
    oc.clip = o->clip;
    qkv_optim *opt = m != NULL ? qkv_params_optim(m->list, &oc, &err) : NULL;
    if (opt == NULL) {
        qkv_seq_model_free(m);
        return cli_fail_status(err.status, "distance: %s", err.message);
    }
    qkv_rng g;
    qkv_rng_seed(&g, data_seed(seed, k, 0));
    r->steps90 = -1;
    r->diverged = 0;
    int rc = CLI_OK;
    const double t0 = wall();
    for (int step = 1; step <= o->steps && rc == CLI_OK; step++) {
        qkv_seq_out out;
        qkv_status s = qkv_distance_batch(b, o->batch, k, &g, &err);
        if (s == QKV_OK)
            s = qkv_seq_train_step(m, opt, t, b, &out);
        if (s == QKV_ERR_NUMERIC) {
            r->diverged = 1;
            qkv_coref_diverged(&err, step, opt, (double)out.loss->data[0]);
            (void)cli_fail("%s: %s", name, err.message); /* a note: the sweep goes on */
            break; /* evaluated as it stands, and said in the table */
        }
        if (s != QKV_OK) {
            char what[64];
            snprintf(what, sizeof what, "distance: %s", qkv_seq_name(kind));
            rc = cli_fail_step(what, &err, t);
            break;
        }
        if (r->steps90 < 0 && (step % o->eval_every == 0 || step == o->steps)) {
            double val = accuracy(m, t, eb, VAL_N, k, data_seed(seed, k, 1));
            if (val < 0)
                rc = cli_fail_status(qkv_tape_status(t), "distance: %s", qkv_tape_error(t));
            else if (val >= 0.9)
                r->steps90 = step;
        }
    }
    r->seconds = wall() - t0;
    if (rc == CLI_OK) {
        r->acc = accuracy(m, t, eb, TEST_N, k, data_seed(seed, k, 2));
        if (r->acc < 0)
            rc = cli_fail_status(qkv_tape_status(t), "distance: %s", qkv_tape_error(t));
    }
    qkv_optim_free(opt);
    qkv_seq_model_free(m);
    return rc;
}

/* The tables; CLI_FAIL, having printed nothing, if a model to count the
 * parameters of cannot be made. */
static int print_table(const dist_opts *o, const qkv_seq_kind *kinds, int nk, const int *ks, int nd,
                       dist_result (*res)[MAX_ITEMS][MAX_SEEDS])
{
    size_t params[MAX_ITEMS];
    for (int i = 0; i < nk; i++) {
        qkv_seq_config c = {kinds[i],
                            qkv_coref_vocab_size(),
                            qkv_coref_classes(),
                            qkv_seq_default_width(kinds[i]),
                            QKV_RNN_TANH,
                            0,
                            NAN};
        qkv_error err = qkv_error_none();
        qkv_seq_model *m = qkv_seq_model_new(&c, &err);
        if (m == NULL)
            return cli_fail_status(err.status, "distance: %s", err.message);
        params[i] = qkv_params_numel(m->list);
        qkv_seq_model_free(m);
    }
    printf("\nTest accuracy (%d fresh sentences) against the distance k between the name and "
           "its pronoun%s\n",
           TEST_N, o->seeds > 1 ? "; mean±sd over seeds" : "");
    char bias[80] = ""; /* NAN: --forget-bias pytorch */
    for (int i = 0; i < nk; i++)
        if (kinds[i] == QKV_SEQ_LSTM) { /* the bias is the LSTM's alone */
            if (isnan(o->forget_bias))
                snprintf(bias, sizeof bias, "; LSTM forget-gate bias PyTorch's U(±1/√H) at init");
            else
                snprintf(bias, sizeof bias, "; LSTM forget-gate bias %g at init", o->forget_bias);
        }
    char clip[32] = "no clipping";
    if (o->clip > 0)
        snprintf(clip, sizeof clip, "clip %g", o->clip);
    printf("Adam lr %g, %s, %d step%s of %d sentence%s%s\n\n"
           "%-10s %7s",
           o->lr, clip, o->steps, o->steps > 1 ? "s" : "", o->batch, o->batch > 1 ? "s" : "", bias,
           "model", "params");
    for (int d = 0; d < nd; d++)
        printf(" %11d", ks[d]);
    printf("\n");
    int diverged = 0; /* runs whose training stopped on a non-finite value */
    for (int i = 0; i < nk; i++) {
        printf("%-10s %7zu", qkv_seq_name(kinds[i]), params[i]);
        for (int d = 0; d < nd; d++) {
            double x[MAX_SEEDS], mean = 0, sd = 0;
            int n = 0;
            for (int s = 0; s < o->seeds; s++)
                if (!res[i][d][s].diverged)
                    x[n++] = res[i][d][s].acc;
            diverged += o->seeds - n;
            if (n > 0)
                cli_mean_sd(x, n, &mean, &sd);
            if (n == 0)
                printf(" %*s", o->seeds > 1 ? 12 : 11, "diverged");
            else if (o->seeds > 1)
                printf("  %.3f±%.3f", mean, sd);
            else
                printf(" %11.3f", mean);
            if (n > 0 && n < o->seeds)
                printf(" (%d/%d)", n, o->seeds);
        }
        printf("\n");
    }
    if (diverged > 0)
        printf("\ndiverged: in %d run(s) the loss or a gradient stopped being finite, so "
               "their\naccuracy means nothing (an (n/N) cell averages the n seeds that did "
               "not; try a\nsmaller --lr)\n",
               diverged);
    printf("\nSteps to 90%% validation accuracy (mean over the seeds that got there; "
           "never: -)\n\n%-10s %7s",
           "model", "");
    for (int d = 0; d < nd; d++)
        printf(" %11d", ks[d]);
    printf("\n");
    for (int i = 0; i < nk; i++) {
        printf("%-10s %7s", qkv_seq_name(kinds[i]), "");
        for (int d = 0; d < nd; d++) {
            double sum = 0;
            int got = 0;
            for (int s = 0; s < o->seeds; s++)
                if (res[i][d][s].steps90 >= 0)
                    sum += res[i][d][s].steps90, got++;
            char cell[32];
            if (got == 0)
                snprintf(cell, sizeof cell, "-");
            else if (got < o->seeds)
                snprintf(cell, sizeof cell, "%.0f (%d/%d)", sum / got, got, o->seeds);
            else
                snprintf(cell, sizeof cell, "%.0f", sum / got);
            printf(" %11s", cell);
        }
        printf("\n");
    }
    return CLI_OK;
}

/* DIR/summary.csv: per model and distance, the mean and sd of the test
 * accuracy over the seeds that did not diverge (nan if none, which a plot
 * leaves out), as the table has them, the mean steps to 90% over the
 * seeds that reached it (-1: none did), and how many seeds diverged. */
static int write_summary(const dist_opts *o, const qkv_seq_kind *kinds, int nk, const int *ks,
                         int nd, dist_result (*res)[MAX_ITEMS][MAX_SEEDS])
{
    char path[4096];
    qkv_error err = qkv_error_none();
    cli_path_in(path, sizeof path, o->out, "summary.csv");
    FILE *f = cli_csv_create(
        path, "model,distance,seeds,acc_mean,acc_sd,steps_to_90_mean,reached,diverged", &err);
    if (f == NULL)
        return cli_fail_status(err.status, "distance: %s", err.message);
    for (int i = 0; i < nk; i++)
        for (int d = 0; d < nd; d++) {
            double x[MAX_SEEDS], mean = NAN, sd = NAN, steps = 0;
            int reached = 0, n = 0;
            for (int s = 0; s < o->seeds; s++) {
                if (!res[i][d][s].diverged)
                    x[n++] = res[i][d][s].acc;
                if (res[i][d][s].steps90 >= 0)
                    steps += res[i][d][s].steps90, reached++;
            }
            if (n > 0)
                cli_mean_sd(x, n, &mean, &sd);
            char m[32] = "nan", sdv[32] = "nan";
            if (n > 0) {
                snprintf(m, sizeof m, "%.4f", mean);
                snprintf(sdv, sizeof sdv, "%.4f", sd);
            }
            cli_csv_printf(f, "%s,%d,%d,%s,%s,%.1f,%d,%d\n", qkv_seq_name(kinds[i]), ks[d],
                           o->seeds, m, sdv, reached ? steps / reached : -1.0, reached,
                           o->seeds - n);
        }
    if (cli_csv_close(f, path) != 0)
        return cli_fail("distance: cannot write %s: %s", path, cli_csv_error());
    return CLI_OK;
}

/* Parses the model list into kinds; the count, or -1. */
/* The runs as tasks (cli_run_tasks), in the serial order: seeds, then
 * distances, then models; each gives its dist_result. */
typedef struct dist_tasks {
    const dist_opts *o;
    const qkv_seq_kind *kinds;
    const int *ks;
    int nk, nd;
    qkv_tape *t;
    qkv_coref_batch *b, *eb;
    FILE *csv;
    dist_result (*res)[MAX_ITEMS][MAX_SEEDS];
} dist_tasks;

static void dist_name(void *ctx, int task, char *buf, size_t len);

static int dist_run(void *ctx, int task, FILE *out)
{
    const dist_tasks *w = ctx;
    const int i = task % w->nk, d = task / w->nk % w->nd, s = task / (w->nk * w->nd);
    dist_result x;
    char name[128];
    dist_name(ctx, task, name, sizeof name);
    int r =
        run_one(w->o, w->kinds[i], w->ks[d], w->o->seed + (uint64_t)s, w->t, w->b, w->eb, name, &x);
    if (r == CLI_OK && fwrite(&x, sizeof x, 1, out) != 1)
        r = cli_fail_status(QKV_ERR_NOMEM, "distance: out of memory");
    return r;
}

/* A run's rough time: the sentence grows with the distance, and the
 * recurrent models cost more per token (seen on one core of an Intel Xeon:
 * at distance 64, attention 0.29 s, RNN 0.31, LSTM 0.47, GRU 0.56). */
static double dist_cost(void *ctx, int task)
{
    const dist_tasks *w = ctx;
    static const double per_kind[] = {
        [QKV_SEQ_ATTENTION] = 1.0, [QKV_SEQ_RNN] = 1.1, [QKV_SEQ_LSTM] = 1.6, [QKV_SEQ_GRU] = 1.9};
    const int i = task % w->nk, d = task / w->nk % w->nd;
    const unsigned k = (unsigned)w->kinds[i];
    return (8.0 + w->ks[d]) * (k < sizeof per_kind / sizeof per_kind[0] ? per_kind[k] : 1.0);
}

static void dist_name(void *ctx, int task, char *buf, size_t len)
{
    const dist_tasks *w = ctx;
    const int i = task % w->nk, d = task / w->nk % w->nd, s = task / (w->nk * w->nd);
    snprintf(buf, len, "distance: the run of %s at distance %d, seed %llu",
             qkv_seq_name(w->kinds[i]), w->ks[d], (unsigned long long)(w->o->seed + (uint64_t)s));
}

static int dist_collect(void *ctx, int task, const char *bytes, size_t len)
{
    const dist_tasks *w = ctx;
    const int i = task % w->nk, d = task / w->nk % w->nd, s = task / (w->nk * w->nd);
    dist_result *x = &w->res[i][d][s];
    if (len != sizeof *x)
        return cli_fail("distance: run %d gave no result", task);
    memcpy(x, bytes, sizeof *x);
    cli_csv_printf(w->csv, "%s,%d,%llu,%.4f,%d,%d,%.3f\n", qkv_seq_name(w->kinds[i]), w->ks[d],
                   (unsigned long long)(w->o->seed + (uint64_t)s), x->acc, x->steps90, x->diverged,
                   x->seconds);
    return CLI_OK;
}

int cmd_distance(int argc, char **argv)
{
    dist_opts o = {"attention,rnn,lstm,gru",
                   "0,2,4,8,16,32,64,128",
                   "out/distance",
                   3,
                   1000,
                   32,
                   0, /* 25, or --steps if fewer */
                   0,
                   0,
                   1,
                   0.01,
                   1.0,
                   QKV_SEQ_FORGET_BIAS,
                   1};
    const char *fb = NULL;
    const cli_opt opts[] = {
        {"models", OPT_STR, &o.models, 0, 0, "LIST: of attention, rnn, lstm, gru (default all)"},
        {"distances", OPT_STR, &o.distances, 0, 0,
         "LIST: filler tokens between name and pronoun (default 0,2,4,8,16,32,64,128)"},
        CLI_OPT_SEEDS(&o.seeds, "N: seeds per model and distance (default 3)"),
        CLI_OPT_STEPS(&o.steps, "N: training steps per run (default 1000)"),
        CLI_OPT_BATCH(&o.batch, "N: sentences per step (default 32)"),
        CLI_OPT_LR(&o.lr, "X: Adam's learning rate (default 0.01)"),
        CLI_OPT_CLIP(&o.clip, "X: clip the gradient norm to X; 0 off (default 1)"),
        {"forget-bias", OPT_STR, &fb, 0, 0,
         "X: the LSTM's forget-gate bias at init, or 'pytorch' for U(±1/√H) (default 1)"},
        CLI_OPT_EVERY(
            "eval-every", &o.eval_every,
            "N: steps between validations, for steps to 90% (default 25, at most --steps)"),
        {"seed", OPT_U64, &o.seed, 0, 0, "N: first seed (default 1)"},
        {"out", OPT_DIR, &o.out, 0, 0, "DIR: output directory (default out/distance)"},
        CLI_OPT_THREADS(&o.threads, "N: threads (default QKV_THREADS or 1)"),
        CLI_OPT_JOBS(&o.jobs,
                     "N: worker processes for the runs (default 1; the same results on any N)"),
        {"quiet", OPT_FLAG, &o.quiet, 0, 0, "no progress bar"},
    };
    int r =
        cli_parse(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]), "[options]",
                  "Trains attention, an Elman RNN, an LSTM and a GRU (about 2.5k\n"
                  "parameters each) on sentences with k neutral filler tokens between a\n"
                  "name and its pronoun, which follows it (小明今天跑步，看书，……，他很爱画画),\n"
                  "with the same optimizer, steps and batches. Writes DIR/runs.csv with\n"
                  "model,distance,seed,test_acc,steps_to_90,diverged,seconds (steps_to_90\n"
                  "is -1 when validation accuracy never reached 0.9; diverged is 1 when\n"
                  "the loss or a gradient stopped being finite), DIR/summary.csv with\n"
                  "each model and distance's test accuracy (mean and sd over the seeds\n"
                  "that did not diverge), mean steps to 90% and diverged seeds, and\n"
                  "prints the tables.",
                  NULL, 0, NULL);
    if (r != CLI_OK)
        return r;
    if (o.eval_every == 0) /* not given: the default, within a short run */
        o.eval_every = o.steps < 25 ? o.steps : 25;
    if (o.eval_every > o.steps)
        return cli_usage_error("distance", "--eval-every %d is more than --steps %d", o.eval_every,
                               o.steps);
    if (fb != NULL && strcmp(fb, "pytorch") == 0)
        o.forget_bias = NAN;
    else if (fb != NULL && (cli_parse_double(fb, &o.forget_bias) != 0 || fabs(o.forget_bias) > 100))
        return cli_usage_error("distance",
                               "--forget-bias: '%s' is not a number in [-100, 100] "
                               "or 'pytorch'",
                               fb);
    qkv_seq_kind kinds[MAX_ITEMS];
    int ks[MAX_ITEMS], nk = cli_model_list(o.models, kinds, MAX_ITEMS);
    int nd = cli_int_list(o.distances, ks, MAX_ITEMS, 0, QKV_DISTANCE_MAX);
    if (nk < 0)
        return cli_usage_error("distance",
                               "--models: '%s' is not a list of distinct models "
                               "from attention, rnn, lstm, gru",
                               o.models);
    int lstm = 0;
    for (int i = 0; i < nk; i++)
        lstm |= kinds[i] == QKV_SEQ_LSTM;
    if (fb != NULL && !lstm) /* else taken and ignored */
        return cli_usage_error("distance",
                               "--forget-bias is the LSTM's forget-gate bias; "
                               "--models '%s' has no lstm",
                               o.models);
    if (nd <= 0)
        return cli_usage_error("distance",
                               "--distances: '%s' is not a list of up to %d "
                               "distinct distances from 0 to %d",
                               o.distances, MAX_ITEMS, QKV_DISTANCE_MAX);
    if (o.threads > 0)
        qkv_threads_use(o.threads, NULL);
    int kmax = 0;
    for (int d = 0; d < nd; d++)
        kmax = ks[d] > kmax ? ks[d] : kmax;
    qkv_error err = qkv_error_none();
    char path[4096];
    /* summary.csv is written after the runs: fail now if it cannot be */
    cli_path_in(path, sizeof path, o.out, "summary.csv");
    if (cli_csv_check(path, &err) != QKV_OK)
        return cli_fail_status(err.status, "distance: %s", err.message);
    cli_path_in(path, sizeof path, o.out, "runs.csv");
    FILE *csv =
        cli_csv_create(path, "model,distance,seed,test_acc,steps_to_90,diverged,seconds", &err);
    if (csv == NULL)
        return cli_fail_status(err.status, "distance: %s", err.message);
    qkv_tape *t = qkv_tape_new(0, &err);
    qkv_coref_batch *b = t ? qkv_coref_batch_new(o.batch, kmax + 8, &err) : NULL;
    qkv_coref_batch *eb = b ? qkv_coref_batch_new(eval_capacity(kmax + 8), kmax + 8, &err) : NULL;
    static dist_result res[MAX_ITEMS][MAX_ITEMS][MAX_SEEDS];
    if (eb == NULL)
        r = cli_fail_status(err.status, "distance: %s", err.message);
    dist_tasks w = {&o, kinds, ks, nk, nd, t, b, eb, csv, res};
    if (r == CLI_OK)
        r = cli_run_tasks(nk * nd * o.seeds, o.jobs, dist_run, dist_collect, dist_cost, dist_name,
                          &w, o.quiet, "runs");
    if (cli_csv_end(csv, path, r == CLI_OK) != 0 && r == CLI_OK)
        r = cli_fail("distance: cannot write %s: %s", path, cli_csv_error());
    if (r == CLI_OK)
        r = write_summary(&o, kinds, nk, ks, nd, res);
    if (r == CLI_OK)
        r = print_table(&o, kinds, nk, ks, nd, res);
    if (r == CLI_OK) {
        char summary[4096];
        printf("\nwrote ");
        cli_put_safe(stdout, path);
        printf(" and ");
        cli_put_safe(stdout, cli_path_in(summary, sizeof summary, o.out, "summary.csv"));
        printf("\n");
    }
    qkv_coref_batch_free(b);
    qkv_coref_batch_free(eb);
    qkv_tape_free(t);
    return r;
}
