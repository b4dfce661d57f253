/*
 * bptt.c - `qkv bptt`: the tutorial's second claim about RNNs (§2), the
 * gradient that vanishes or explodes through time, measured.
 *
 * An Elman RNN reads distance sentences (seq.h) and is trained by
 * backpropagation through time; after one backward pass every state h_t on
 * the tape holds ∂L/∂h_t. With W_h = ρ·U, U a random orthogonal matrix
 * (every singular value and every |eigenvalue| of W_h is ρ), a linear
 * recurrence multiplies the gradient by exactly ρ per step back, which is
 * the tutorial's "multiplied by a number below or above 1"; tanh multiplies
 * it by less. The LSTM, and both models after training, are measured too.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define MAX_RHO 16

typedef struct bptt_opts {
    const char *rhos, *out;
    int length, batch, train_steps, quiet;
    uint64_t seed;
} bptt_opts;

/* W (H×H, row-major) = rho·U with U orthogonal: modified Gram-Schmidt on
 * the rows of a matrix of N(0,1) draws from g. */
static void scaled_orthogonal(qkv_tensor *w, double rho, qkv_rng *g)
{
    const int H = w->shape[0];
    double *q = malloc(sizeof *q * (size_t)H * H);
    for (int i = 0; i < H * H; i++)
        q[i] = qkv_rng_normalvariate(g, 0, 1);
    for (int i = 0; i < H; i++) {
        for (int j = 0; j < i; j++) {
            double d = 0;
            for (int c = 0; c < H; c++)
                d += q[i * H + c] * q[j * H + c];
            for (int c = 0; c < H; c++)
                q[i * H + c] -= d * q[j * H + c];
        }
        double n = 0;
        for (int c = 0; c < H; c++)
            n += q[i * H + c] * q[i * H + c];
        for (int c = 0; c < H; c++)
            q[i * H + c] /= sqrt(n);
    }
    for (int i = 0; i < H * H; i++)
        w->data[i] = (qkv_real)(rho * q[i]);
    free(q);
}

/* The spectral radius of a square W by Gelfand's formula: ‖W^n‖^(1/n) with
 * n = 512, renormalising as it goes. */
static double spectral_radius(const qkv_tensor *w)
{
    const int H = w->shape[0];
    double *m = malloc(sizeof *m * (size_t)H * H), *next = malloc(sizeof *m * (size_t)H * H);
    double log_norm = 0;
    const int n = 512;
    for (int i = 0; i < H * H; i++)
        m[i] = (double)w->data[i];
    for (int step = 1; step < n; step++) {
        double norm = 0;
        for (int i = 0; i < H; i++)
            for (int j = 0; j < H; j++) {
                double s = 0;
                for (int k = 0; k < H; k++)
                    s += m[i * H + k] * (double)w->data[k * H + j];
                next[i * H + j] = s;
                norm += s * s;
            }
        norm = sqrt(norm);
        if (norm == 0)
            break;
        log_norm += log(norm);
        for (int i = 0; i < H * H; i++)
            m[i] = next[i] / norm;
    }
    free(m);
    free(next);
    return exp(log_norm / n);
}

/* Least-squares slope of ln y[j] against j over j = 1 .. n-1 (j = 0, the
 * pronoun's own step, is left out: the loss reaches it through Wo, not
 * through W_h). */
static double log_slope(const double *y, int n)
{
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    int m = 0;
    for (int j = 1; j < n; j++) {
        if (!(y[j] > 0))
            continue;
        double ly = log(y[j]);
        sx += j, sy += ly, sxx += (double)j * j, sxy += j * ly;
        m++;
    }
    return m > 1 ? (m * sxy - sx * sy) / (m * sxx - sx * sx) : NAN;
}

typedef struct bptt_ctx {
    const bptt_opts *o;
    qkv_tape *tape;
    qkv_coref_batch *batch;
    FILE *csv;
    int k; /* fillers: the sentence has o->length tokens */
} bptt_ctx;

/* Why a row has no slope: its states or gradient overflowed, or fewer
 * than two steps got a gradient at all (a saturated softmax sends back 0,
 * or it underflowed); the footnotes under the table say so. */
enum { FIT_OK, FIT_OVERFLOW, FIT_NO_GRAD };
static const char *const unfit_word[] = {"", "overflow", "no grad"};

/* One backward pass of m on a fixed batch; writes ‖∂L/∂h_{p-j}‖ for j = 0
 * .. p to the CSV and returns the fitted slope (NAN after an error, with
 * *rc set); *fit is FIT_OK or why there is no slope. */
static double measure(bptt_ctx *c, qkv_seq_model *m, const char *model, const char *rho,
                      const char *act, double *g0_over_gp, int *fit, int *rc)
{
    qkv_rng g;
    qkv_rng_seed(&g, c->o->seed + 77);
    qkv_error err = qkv_error_none();
    qkv_seq_out out;
    qkv_params_zero_grad(m->list);
    qkv_tape_reset(c->tape);
    qkv_tape_set_grad(c->tape, 1);
    if (qkv_distance_batch(c->batch, c->o->batch, c->k, &g, &err) != QKV_OK ||
        qkv_seq_forward(m, c->tape, c->batch, &out) != QKV_OK ||
        qkv_backward(c->tape, out.loss) != QKV_OK) {
        *rc = cli_fail_step("bptt", &err, c->tape);
        return NAN;
    }
    const int p = c->batch->query[0]; /* every sentence has its pronoun here */
    double norms[QKV_DISTANCE_MAX + 8] = {0};
    int finite = isfinite(out.loss->data[0]);
    for (int j = 0; j <= p; j++) {
        norms[j] = qkv_grad_norm(&out.h[p - j], 1);
        finite &= isfinite(norms[j]);
        cli_csv_printf(c->csv, "%s,%s,%s,%d,%.6g\n", model, rho, act, j, cli_num(norms[j]));
    }
    *g0_over_gp = norms[p] / norms[1];
    const double slope = log_slope(norms, p + 1);
    *fit = !finite ? FIT_OVERFLOW : isnan(slope) ? FIT_NO_GRAD : FIT_OK;
    return slope;
}

/* The slope, slope/ln rho and ‖g_p‖/‖g_1‖ cells of a row (ln_rho NAN: no
 * rho; ln_rho 0, rho = 1: no ratio), or the word for why there is no slope
 * and dashes. */
static void row_cells(int fit, double slope, double ln_rho, double total, char *s, char *r, char *q,
                      size_t n)
{
    /* a slope of -1e-9 is 0 to 4 decimals, not "-0.0000" */
    snprintf(s, n, "%.4f", fabs(slope) < 5e-5 ? 0.0 : slope);
    snprintf(r, n, "%.3f", ln_rho != 0 ? slope / ln_rho : NAN);
    snprintf(q, n, "%.3g", total);
    if (isnan(ln_rho) || ln_rho == 0)
        snprintf(r, n, "-");
    if (fit != FIT_OK) {
        snprintf(s, n, "%s", unfit_word[fit]);
        snprintf(r, n, "-");
        snprintf(q, n, "-");
    }
}

/* Trains m on distance sentences for o->train_steps steps. A step that
 * diverges ends the training, and says why on stderr: the row named name
 * then measures the model as training left it. */
static int train(bptt_ctx *c, qkv_seq_model *m, const char *name)
{
    qkv_error err = qkv_error_none();
    qkv_optim_config oc = qkv_optim_defaults(QKV_ADAM);
    oc.lr = 0.01;
    oc.clip = 1;
    qkv_optim *opt = qkv_params_optim(m->list, &oc, &err);
    if (opt == NULL)
        return cli_fail_status(err.status, "bptt: %s", err.message);
    qkv_rng g;
    qkv_rng_seed(&g, c->o->seed + 5);
    int rc = CLI_OK;
    for (int s = 0; s < c->o->train_steps && rc == CLI_OK; s++) {
        qkv_seq_out out;
        qkv_status st = qkv_distance_batch(c->batch, c->o->batch, c->k, &g, &err);
        if (st == QKV_OK)
            st = qkv_seq_train_step(m, opt, c->tape, c->batch, &out);
        if (st == QKV_ERR_NUMERIC) { /* a note: the table goes on */
            qkv_coref_diverged(&err, s + 1, opt, (double)out.loss->data[0]);
            (void)cli_fail("bptt: %s: %s; it is measured as training left it", name, err.message);
            break;
        }
        if (st != QKV_OK)
            rc = cli_fail_step("bptt", &err, c->tape);
    }
    qkv_optim_free(opt);
    return rc;
}

static qkv_seq_model *model(const bptt_opts *o, qkv_seq_kind kind, qkv_rnn_act act)
{
    qkv_error err = qkv_error_none();
    qkv_seq_config mc = {
        kind,    qkv_coref_vocab_size(), qkv_coref_classes(), qkv_seq_default_width(kind), act,
        o->seed, QKV_SEQ_FORGET_BIAS};
    qkv_seq_model *m = qkv_seq_model_new(&mc, &err);
    if (m == NULL)
        cli_fail_status(err.status, "bptt: %s", err.message);
    return m;
}

static int run(bptt_ctx *c, const double *rhos, int nr)
{
    const bptt_opts *o = c->o;
    int rc = CLI_OK, done = 0, total = 2 * nr + 2 + (o->train_steps > 0 ? 2 : 0);
    int unfit[3] = {0}; /* rows without a slope, by why */
    char cs[32], cr[32], cq[32];
    printf("\n‖g_j‖ = ‖∂L/∂h_{p-j}‖: the gradient j steps back from the pronoun p = %d,\n"
           "in a sentence of %d tokens; slope: least squares of ln‖g_j‖ over j = 1..%d;\n"
           "‖g_p‖/‖g_1‖: at the first token's state against the state before the pronoun\n\n",
           c->k + QKV_DISTANCE_BASE, o->length, c->k + QKV_DISTANCE_BASE);
    printf("%-12s %-7s %8s %12s %12s %12s ", "model", "act", "rho", "slope", "ln rho",
           "slope/ln rho");
    cli_print_right(stdout, "‖g_p‖/‖g_1‖", 16); /* ‖: one column, three bytes */
    printf("\n");
    static const char *acts[2] = {"linear", "tanh"};
    for (int a = 0; a < 2 && rc == CLI_OK; a++)
        for (int i = 0; i < nr && rc == CLI_OK; i++) {
            char rho[32], status[64];
            snprintf(rho, sizeof rho, "%g", rhos[i]);
            snprintf(status, sizeof status, "%s rho=%s", acts[a], rho);
            cli_progress(o->quiet, done++, total, status, 0);
            qkv_seq_model *m = model(o, QKV_SEQ_RNN, a == 0 ? QKV_RNN_LINEAR : QKV_RNN_TANH);
            if (m == NULL)
                return CLI_FAIL;
            qkv_rng g;
            qkv_rng_seed(&g, o->seed + 1000 + (uint64_t)i);
            scaled_orthogonal(m->rnn.wh, rhos[i], &g);
            int fit = FIT_OK;
            double total_factor,
                slope = measure(c, m, "rnn", rho, acts[a], &total_factor, &fit, &rc);
            cli_progress_clear(); /* the row takes the bar's line */
            row_cells(fit, slope, log(rhos[i]), total_factor, cs, cr, cq, sizeof cs);
            /* two decimals, as the defaults read, unless they would round
             * the radius given (0.001 is not 0.00) */
            char shown[32];
            snprintf(shown, sizeof shown, "%.2f", rhos[i]);
            if (strtod(shown, NULL) != rhos[i])
                snprintf(shown, sizeof shown, "%g", rhos[i]);
            if (rc == CLI_OK) {
                unfit[fit]++;
                printf("%-12s %-7s %8s %12s %12.4f %12s %16s\n", "rnn", acts[a], shown, cs,
                       log(rhos[i]), cr, cq);
            }
            qkv_seq_model_free(m);
        }
    /* the tanh RNN with PyTorch's initialisation and the LSTM, before and
     * after training (rnn-init, lstm-init, rnn-trained, lstm-trained); the
     * RNN's rho is its W_h's spectral radius */
    for (int trained = 0; trained <= (o->train_steps > 0) && rc == CLI_OK; trained++)
        for (int kind = QKV_SEQ_RNN; kind <= QKV_SEQ_LSTM && rc == CLI_OK; kind++) {
            char name[32], rho[32] = "";
            snprintf(name, sizeof name, "%s-%s", qkv_seq_name((qkv_seq_kind)kind),
                     trained ? "trained" : "init");
            cli_progress(o->quiet, done++, total, name, 0);
            qkv_seq_model *m = model(o, (qkv_seq_kind)kind, QKV_RNN_TANH);
            if (m == NULL)
                return CLI_FAIL;
            if (trained)
                rc = train(c, m, name);
            double r = kind == QKV_SEQ_RNN ? spectral_radius(m->rnn.wh) : NAN;
            if (kind == QKV_SEQ_RNN)
                snprintf(rho, sizeof rho, "%.4g", r);
            double total_factor = NAN, slope = NAN;
            int fit = FIT_OK;
            if (rc == CLI_OK)
                slope = measure(c, m, name, rho, kind == QKV_SEQ_RNN ? "tanh" : "gates",
                                &total_factor, &fit, &rc);
            cli_progress_clear();
            row_cells(fit, slope, log(r), total_factor, cs, cr, cq, sizeof cs);
            if (rc == CLI_OK)
                unfit[fit]++;
            if (rc == CLI_OK && kind == QKV_SEQ_RNN)
                printf("%-12s %-7s %8.4f %12s %12.4f %12s %16s\n", name, "tanh", r, cs, log(r), cr,
                       cq);
            else if (rc == CLI_OK)
                printf("%-12s %-7s %8s %12s %12s %12s %16s\n", name, "gates", "-", cs, "-", cr, cq);
            qkv_seq_model_free(m);
        }
    cli_progress_clear();
    if (rc == CLI_OK && unfit[FIT_OVERFLOW] > 0)
        printf("\noverflow: the states or the gradient grew past the largest number the scalar "
               "type holds\nwithin the sentence, so no slope can be fitted (try a smaller --rho "
               "or --length)\n");
    /* a saturated softmax (rho large) or an underflow (rho tiny): a
     * smaller rho is the wrong advice for the second */
    if (rc == CLI_OK && unfit[FIT_NO_GRAD] > 0)
        printf("\nno grad: the loss sent back no gradient (its softmax saturated, or the "
               "gradient\nunderflowed to 0), so no slope can be fitted (try a --rho nearer 1, "
               "or a smaller\n--length)\n");
    return rc;
}

int cmd_bptt(int argc, char **argv)
{
    bptt_opts o = {"0.5,0.9,1,1.1,1.5", "out/bptt", 64, 32, 400, 0, 1};
    const cli_opt opts[] = {
        {"rho", OPT_STR, &o.rhos, 0, 0, "LIST: spectral radii of W_h (default 0.5,0.9,1,1.1,1.5)"},
        {"length", OPT_INT, &o.length, 9, 1024,
         "N: tokens per sentence; the pronoun is the 4th from the end (default 64)"},
        CLI_OPT_BATCH(&o.batch, "N: sentences in the measured batch (default 32)"),
        {"train-steps", OPT_INT, &o.train_steps, 0, CLI_MAX_STEPS,
         "N: steps before the after-training measurement; 0 skips it (default 400)"},
        {"seed", OPT_U64, &o.seed, 0, 0, "N: seed of weights and sentences (default 1)"},
        {"out", OPT_DIR, &o.out, 0, 0, "DIR: output directory (default out/bptt)"},
        {"quiet", OPT_FLAG, &o.quiet, 0, 0, "no progress bar"},
    };
    int r = cli_parse(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]), "[options]",
                      "Measures the gradient that flows back through an RNN: for W_h = rho·U (U\n"
                      "random orthogonal), with a linear and a tanh recurrence, and for the LSTM\n"
                      "and the tanh RNN at PyTorch's initialisation and after training, it\n"
                      "writes DIR/grads.csv with model,rho,activation,steps_back,grad_norm and\n"
                      "compares the fitted decay rate with ln rho.",
                      NULL, 0, NULL);
    if (r != CLI_OK)
        return r;
    double rhos[MAX_RHO];
    int nr = 0;
    {
        char buf[256], *item[MAX_RHO];
        const int n = cli_split_list(o.rhos, buf, sizeof buf, item, MAX_RHO);
        nr = n < 0 ? -1 : 0;
        for (int k = 0; k < n && nr >= 0; k++)
            if (cli_parse_double(item[k], &rhos[k]) != 0 || !(rhos[k] > 0) || rhos[k] > 10)
                nr = -1;
            else
                nr++;
        for (int k = 1; k < nr; k++) /* a repeat would print the same rows twice */
            for (int i = 0; i < k; i++)
                if (rhos[i] == rhos[k])
                    nr = -1;
        if (nr <= 0)
            return cli_usage_error("bptt",
                                   "--rho: '%s' is not a list of up to %d distinct "
                                   "radii in (0, 10]",
                                   o.rhos, MAX_RHO);
    }
    qkv_error err = qkv_error_none();
    char path[4096];
    cli_path_in(path, sizeof path, o.out, "grads.csv");
    bptt_ctx c = {&o, NULL, NULL, NULL, o.length - 8};
    c.csv = cli_csv_create(path, "model,rho,activation,steps_back,grad_norm", &err);
    if (c.csv == NULL)
        return cli_fail_status(err.status, "bptt: %s", err.message);
    if ((c.tape = qkv_tape_new(0, &err)) == NULL ||
        (c.batch = qkv_coref_batch_new(o.batch, o.length, &err)) == NULL)
        r = cli_fail_status(err.status, "bptt: %s", err.message);
    if (r == CLI_OK)
        r = run(&c, rhos, nr);
    if (cli_csv_end(c.csv, path, r == CLI_OK) != 0 && r == CLI_OK)
        r = cli_fail("bptt: cannot write %s: %s", path, cli_csv_error());
    if (r == CLI_OK) {
        printf("\nwrote ");
        cli_put_safe(stdout, path);
        printf("\n");
    }
    qkv_coref_batch_free(c.batch);
    qkv_tape_free(c.tape);
    return r;
}
