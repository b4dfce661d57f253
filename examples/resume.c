/*
 * resume.c - a run stopped after STOP steps and resumed takes the same
 * steps, to the bit, as one that never stopped: the weights go to one
 * safetensors file (qkv_safetensors_save), the optimizer's state (Adam's
 * moments, its step count, the rate in use) to another (qkv_optim_save).
 *
 * The model is x (ROWS×IN) -> tanh(linear) (ROWS×HIDDEN) -> linear
 * (ROWS×OUT), an MSE loss, Adam with clipping under a warm-up and cosine
 * schedule. Each step's batch is made from the step count, so the resumed
 * run sees the same batches. It prints whether the resumed weights equal
 * the straight run's, and whether the weights alone (a fresh optimizer)
 * would have; it exits 0 when the first holds and the second does not.
 * Both files go to a temporary directory (in $TMPDIR, or /tmp), removed
 * at the end. A real resume saves in one run and loads in the next; one
 * program does both here so that it can compare with the straight run.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qkv.h"

enum { IN = 3, HIDDEN = 8, OUT = 2, ROWS = 16, WARMUP = 20, STOP = 80, STEPS = 200 };

typedef struct model {
    qkv_params *p;
    qkv_linear l1, l2;
} model;

static int model_init(model *m, uint64_t seed, qkv_error *err)
{
    m->p = qkv_params_new(seed, err);
    return m->p != NULL && qkv_linear_init(&m->l1, m->p, "l1", IN, HIDDEN, 1, err) == QKV_OK &&
           qkv_linear_init(&m->l2, m->p, "l2", HIDDEN, OUT, 1, err) == QKV_OK;
}

/* Steps from to to (0-based): the rate from the schedule and the batch of
 * step s. 0, or -1 with a message. */
static int train(model *m, qkv_optim *opt, const qkv_optim_config *oc, qkv_tape *t, long from,
                 long to)
{
    for (long s = from; s < to; s++) {
        qkv_optim_set_lr(opt, qkv_lr_warmup_cosine(s, WARMUP, STEPS, oc->lr, oc->lr / 10));
        qkv_params_zero_grad(m->p);
        qkv_tape_reset(t);
        qkv_tensor *x = qkv_tape_tensor(t, 2, (const int[]){ROWS, IN}, 0);
        qkv_tensor *y = qkv_tape_tensor(t, 2, (const int[]){ROWS, OUT}, 0);
        for (int i = 0; i < ROWS * IN; i++) /* the batch of step s */
            x->data[i] = (qkv_real)sin(0.7 * i + 0.3 * (double)s);
        for (int i = 0; i < ROWS * OUT; i++)
            y->data[i] = (qkv_real)cos(1.3 * i - 0.2 * (double)s);
        qkv_tensor *h = qkv_tanh(t, qkv_linear_forward(t, &m->l1, x));
        qkv_tensor *loss = qkv_mse(t, qkv_linear_forward(t, &m->l2, h), y);
        if (qkv_backward(t, loss) != QKV_OK || qkv_optim_step(opt) != QKV_OK) {
            fprintf(stderr, "resume: step %ld: %s\n", s,
                    qkv_tape_status(t) != QKV_OK ? qkv_tape_error(t) : qkv_optim_error(opt));
            return -1;
        }
    }
    return 0;
}

/* Whether every weight of a and b has the same bits. */
static int same_weights(const model *a, const model *b)
{
    for (int i = 0; i < qkv_params_count(a->p); i++) {
        const qkv_tensor *u = qkv_params_at(a->p, i, NULL), *v = qkv_params_at(b->p, i, NULL);
        if (memcmp(u->data, v->data, u->numel * sizeof *u->data) != 0)
            return 0;
    }
    return 1;
}

int main(int argc, char **argv)
{
    if (argc > 1) { /* it takes none: --help says what it does */
        const int help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0;
        if (!help) {
            char arg[256]; /* escaped: an argument cannot steer the terminal */
            qkv_escape(arg, sizeof arg, argv[1]);
            fprintf(stderr, "resume: unexpected argument '%s'\n", arg);
        }
        fprintf(help ? stdout : stderr,
                "usage: resume\n"
                "Trains a small model straight through, and again stopped and resumed\n"
                "from saved weights and optimizer state; compares. It takes no arguments.\n");
        return help ? 0 : 2;
    }
    const char *tmpdir = getenv("TMPDIR");
    char dir[4096], weights[4200], optim[4200];
    snprintf(dir, sizeof dir, "%s/resume.XXXXXX", tmpdir != NULL && *tmpdir ? tmpdir : "/tmp");
    if (mkdtemp(dir) == NULL) {
        char shown[4200];
        *strrchr(dir, '/') = '\0'; /* the parent named, not a name it never made */
        qkv_escape(shown, sizeof shown, dir);
        fprintf(stderr, "resume: cannot make a directory in %s: %s\n", shown, strerror(errno));
        return 1;
    }
    snprintf(weights, sizeof weights, "%s/weights.safetensors", dir);
    snprintf(optim, sizeof optim, "%s/optim.safetensors", dir);
    qkv_error err = qkv_error_none();
    qkv_optim_config oc = qkv_optim_defaults(QKV_ADAM);
    oc.clip = 1;
    model a = {0}, b = {0}, r = {0}, w = {0};
    qkv_optim *oa = NULL, *ob = NULL, *opt = NULL, *ow = NULL;
    qkv_tape *t = qkv_tape_new(0, &err);
    int rc = 1;
    if (t == NULL || !model_init(&a, 1, &err) || !model_init(&b, 1, &err) ||
        !model_init(&r, 2, &err) || !model_init(&w, 2, &err) ||
        (oa = qkv_params_optim(a.p, &oc, &err)) == NULL ||
        (ob = qkv_params_optim(b.p, &oc, &err)) == NULL) {
        fprintf(stderr, "resume: %s\n", err.message);
        goto done;
    }
    /* a: all STEPS straight; b: STOP steps, then both files */
    if (train(&a, oa, &oc, t, 0, STEPS) != 0 || train(&b, ob, &oc, t, 0, STOP) != 0)
        goto done;
    if (qkv_safetensors_save(b.p, weights, NULL, 0, &err) != QKV_OK ||
        qkv_optim_save(ob, optim, &err) != QKV_OK) {
        fprintf(stderr, "resume: %s\n", err.message);
        goto done;
    }

    /* r: the same model and config (another seed: the load overwrites it) */
    opt = qkv_params_optim(r.p, &oc, &err);
    if (opt == NULL || qkv_safetensors_load(r.p, weights, &err) != QKV_OK ||
        qkv_optim_load(opt, optim, &err) != QKV_OK) {
        fprintf(stderr, "resume: %s\n", err.message);
        goto done;
    }
    printf("resumed at step %ld, lr %.6g\n", qkv_optim_steps(opt), qkv_optim_lr(opt));
    if (train(&r, opt, &oc, t, qkv_optim_steps(opt), STEPS) != 0)
        goto done;

    /* the weights alone, with a fresh optimizer (no moments, its count at 0) */
    ow = qkv_params_optim(w.p, &oc, &err);
    if (ow == NULL || qkv_safetensors_load(w.p, weights, &err) != QKV_OK) {
        fprintf(stderr, "resume: %s\n", err.message);
        goto done;
    }
    if (train(&w, ow, &oc, t, STOP, STEPS) != 0)
        goto done;
    printf("weights and optimizer state: %s\n", same_weights(&a, &r) ? "the same bits" : "differ");
    printf("weights alone:               %s\n", same_weights(&a, &w) ? "the same bits" : "differ");
    rc = same_weights(&a, &r) && !same_weights(&a, &w) ? 0 : 1;
done:
    remove(weights);
    remove(optim);
    rmdir(dir);
    qkv_optim_free(oa);
    qkv_optim_free(ob);
    qkv_optim_free(opt);
    qkv_optim_free(ow);
    qkv_tape_free(t);
    qkv_params_free(a.p);
    qkv_params_free(b.p);
    qkv_params_free(r.p);
    qkv_params_free(w.p);
    return rc;
}
