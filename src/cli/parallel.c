/*
 * parallel.c - `qkv parallel`: the tutorial's third claim about RNNs (§2),
 * that they must run step after step, measured two ways for each model and
 * sequence length: the tape's critical path (the longest chain of
 * dependent ops, a property of the computation) and the wall time of a
 * training step on one and on two threads (a property of this machine).
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define MAX_ITEMS 16

typedef struct par_opts {
    const char *models, *lengths, *out;
    int batch, threads, quiet, flush;
    double min_time;
    uint64_t seed;
} par_opts;

typedef struct par_cell {
    size_t path, nodes;
    double ms;
} par_cell;

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One training step of m, the step-th of its optimizer; on failure says
 * why, the tape's error or, for a step that diverged, the optimizer's
 * account of what it refused, as "parallel: what: ...". */
static int train_step(qkv_seq_model *m, qkv_optim *opt, qkv_tape *t, qkv_coref_batch *b, long step,
                      const char *what)
{
    qkv_seq_out out;
    const qkv_status s = qkv_seq_train_step(m, opt, t, b, &out);
    if (s == QKV_OK)
        return CLI_OK;
    if (s != QKV_ERR_NUMERIC)
        return cli_fail_status(qkv_tape_status(t), "parallel: %s: %s", what, qkv_tape_error(t));
    qkv_error err = qkv_error_none();
    qkv_coref_diverged(&err, (int)(step < INT_MAX ? step : INT_MAX), opt,
                       (double)out.loss->data[0]);
    return cli_fail_status(s, "parallel: %s: %s", what, err.message);
}

/* The median over 5 blocks of the time of one training step, each block
 * running enough steps to last min_time seconds; -1 after an error, which
 * it has said. The block that first lasts min_time is the first of the 5.
 * *steps counts the steps of opt. */
static double step_time(qkv_seq_model *m, qkv_optim *opt, qkv_tape *t, qkv_coref_batch *b,
                        double min_time, long *steps, const char *what)
{
    long reps = 1;
    double times[5];
    if (train_step(m, opt, t, b, ++*steps, what) != CLI_OK)
        return -1;
    for (int k = 0; k < 5;) {
        double t0 = wall();
        for (long r = 0; r < reps; r++)
            if (train_step(m, opt, t, b, ++*steps, what) != CLI_OK)
                return -1;
        double dt = wall() - t0;
        if (k > 0 || dt >= min_time || reps > 100000)
            times[k++] = dt / (double)reps;
        else
            reps = dt > 0 ? (long)(reps * fmin(100, 1.5 * min_time / dt)) + 1 : reps * 10;
    }
    qsort(times, 5, sizeof times[0], cmp_double);
    return times[2];
}

/* Parses the model list; the count, or -1. */
int cmd_parallel(int argc, char **argv)
{
    par_opts o = {
        "attention,rnn,lstm,gru", "16,32,64,128,256", "out/parallel", 32, 2, 0, 0, 0.2, 1};
    const cli_opt opts[] = {
        {"models", OPT_STR, &o.models, 0, 0, "LIST: of attention, rnn, lstm, gru (default all)"},
        {"lengths", OPT_STR, &o.lengths, 0, 0,
         "LIST: sentence lengths T, at least 9 (default 16,32,64,128,256)"},
        CLI_OPT_BATCH(&o.batch, "N: sentences per step (default 32)"),
        CLI_OPT_THREADS(&o.threads,
                        "N: also time each step on N threads (default 2; 1: one thread only)"),
        {"min-time", OPT_DOUBLE, &o.min_time, 1e-3, 60,
         "X: seconds per timed block, 5 blocks per cell (default 0.2)"},
        {"seed", OPT_U64, &o.seed, 0, 0, "N: seed of weights and sentences (default 1)"},
        {"out", OPT_DIR, &o.out, 0, 0, "DIR: output directory (default out/parallel)"},
        {"flush-denormals", OPT_FLAG, &o.flush, 0, 0,
         "time with subnormal numbers flushed to zero (see above)"},
        {"quiet", OPT_FLAG, &o.quiet, 0, 0, "no progress bar"},
    };
    int r = cli_parse(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]), "[options]",
                      "For each model and sentence length T, counts the training step's\n"
                      "critical path (the longest chain of dependent ops on the tape) and\n"
                      "times the step on 1 and N threads. Writes DIR/steps.csv with\n"
                      "model,T,threads,critical_path,nodes,ms_per_step.\n\n"
                      "A recurrence's gradient vanishes through time; past about T = 200\n"
                      "it reaches subnormal floats, on which x86 CPUs are many times\n"
                      "slower. --flush-denormals times the steps with those flushed to\n"
                      "zero (qkv_flush_denormals), which shows the algorithm's cost.",
                      NULL, 0, NULL);
    if (r != CLI_OK)
        return r;
    if (o.flush && !qkv_flush_denormals(1))
        return cli_fail("parallel: --flush-denormals: this CPU (or emulator) cannot flush "
                        "subnormal numbers");
    qkv_seq_kind kinds[MAX_ITEMS];
    int Ts[MAX_ITEMS], nk = cli_model_list(o.models, kinds, MAX_ITEMS);
    int nt = cli_int_list(o.lengths, Ts, MAX_ITEMS, 9, QKV_DISTANCE_MAX + 8);
    if (nk < 0)
        return cli_usage_error("parallel",
                               "--models: '%s' is not a list of distinct models from "
                               "attention, rnn, lstm, gru",
                               o.models);
    if (nt <= 0)
        return cli_usage_error("parallel",
                               "--lengths: '%s' is not a list of up to %d distinct "
                               "lengths from 9 to %d",
                               o.lengths, MAX_ITEMS, QKV_DISTANCE_MAX + 8);
    int tmax = 0;
    for (int i = 0; i < nt; i++)
        tmax = Ts[i] > tmax ? Ts[i] : tmax;
    qkv_error err = qkv_error_none();
    char path[4096];
    cli_path_in(path, sizeof path, o.out, "steps.csv");
    FILE *csv = cli_csv_create(path, "model,T,threads,critical_path,nodes,ms_per_step", &err);
    if (csv == NULL)
        return cli_fail_status(err.status, "parallel: %s", err.message);
    qkv_tape *t = qkv_tape_new(0, &err);
    qkv_coref_batch *b = t != NULL ? qkv_coref_batch_new(o.batch, tmax, &err) : NULL;
    if (b == NULL)
        r = cli_fail_status(err.status, "parallel: %s", err.message);
    const int nthreads = o.threads > 1 ? 2 : 1, total = nk * nt * nthreads;
    static par_cell cell[MAX_ITEMS][MAX_ITEMS][2];
    int done = 0;
    printf("\nOne training step (forward, backward, Adam) on %d sentence%s of T tokens\n\n",
           o.batch, o.batch > 1 ? "s" : "");
    printf("%-10s %5s %14s %8s %14s", "model", "T", "critical path", "nodes", "ms (1 thread)");
    if (nthreads > 1) { /* the second count, as the CSV's threads column has it */
        char head[32];
        snprintf(head, sizeof head, "ms (%d threads)", o.threads);
        printf(" %15s %8s", head, "speed-up");
    }
    printf("\n");
    for (int i = 0; i < nk && r == CLI_OK; i++)
        for (int j = 0; j < nt && r == CLI_OK; j++) {
            qkv_seq_config mc = {kinds[i],
                                 qkv_coref_vocab_size(),
                                 qkv_coref_classes(),
                                 qkv_seq_default_width(kinds[i]),
                                 QKV_RNN_TANH,
                                 o.seed,
                                 QKV_SEQ_FORGET_BIAS};
            qkv_optim_config oc = qkv_optim_defaults(QKV_ADAM);
            oc.lr = 1e-3;
            qkv_seq_model *m = qkv_seq_model_new(&mc, &err);
            qkv_optim *opt = m != NULL ? qkv_params_optim(m->list, &oc, &err) : NULL;
            qkv_rng g;
            qkv_rng_seed(&g, o.seed);
            size_t path_len = 0, nodes = 0;
            qkv_status cs; /* the critical path's */
            double ms[2] = {0, 0};
            long steps = 0; /* of opt, for a message */
            char what[64];
            snprintf(what, sizeof what, "%s at T = %d", qkv_seq_name(kinds[i]), Ts[j]);
            if (opt == NULL || qkv_distance_batch(b, o.batch, Ts[j] - 8, &g, &err) != QKV_OK)
                r = cli_fail_status(err.status, "parallel: %s", err.message);
            else
                r = train_step(m, opt, t, b, ++steps, what);
            if (r == CLI_OK &&
                (cs = qkv_tape_critical_path(t, &path_len)) != QKV_OK) /* not on the tape */
                r = cli_fail_status(cs, "parallel: the critical path: %s", qkv_status_string(cs));
            nodes = qkv_tape_nodes(t);
            for (int k = 0; k < nthreads && r == CLI_OK; k++) {
                char status[64];
                snprintf(status, sizeof status, "%s T=%d, %d thread(s)", qkv_seq_name(kinds[i]),
                         Ts[j], k ? o.threads : 1);
                cli_progress(o.quiet, done++, total, status, 0);
                qkv_threads_use(k ? o.threads : 1, NULL);
                double s = step_time(m, opt, t, b, o.min_time, &steps, what);
                if (s < 0)
                    r = CLI_FAIL; /* said */
                ms[k] = 1e3 * s;
                cell[i][j][k] = (par_cell){path_len, nodes, ms[k]};
            }
            qkv_threads_use(1, NULL);
            cli_progress_clear(); /* the row takes the bar's line */
            if (r == CLI_OK) {
                printf("%-10s %5d %14zu %8zu %14.3f", qkv_seq_name(kinds[i]), Ts[j], path_len,
                       nodes, ms[0]);
                if (nthreads > 1)
                    printf(" %15.3f %7.2fx", ms[1], ms[0] / ms[1]);
                printf("\n");
            }
            qkv_optim_free(opt);
            qkv_seq_model_free(m);
        }
    /* grouped by model and thread count, so a plot's lines run through
     * consecutive rows */
    for (int i = 0; i < nk && r == CLI_OK; i++)
        for (int k = 0; k < nthreads; k++)
            for (int j = 0; j < nt; j++)
                cli_csv_printf(csv, "%s,%d,%d,%zu,%zu,%.4f\n", qkv_seq_name(kinds[i]), Ts[j],
                               k ? o.threads : 1, cell[i][j][k].path, cell[i][j][k].nodes,
                               cell[i][j][k].ms);
    if (cli_csv_end(csv, path, r == CLI_OK) != 0 && r == CLI_OK)
        r = cli_fail("parallel: cannot write %s: %s", path, cli_csv_error());
    if (r == CLI_OK) {
        printf("\n(%ld cores online) wrote ", sysconf(_SC_NPROCESSORS_ONLN));
        cli_put_safe(stdout, path);
        printf("\n");
    }
    qkv_coref_batch_free(b);
    qkv_tape_free(t);
    return r;
}
