/*
 * least_squares.c - fits a line through noisy points by gradient descent on
 * the mean squared error, y ≈ X·w + b with X (256×3), and checks the fit
 * against the closed-form least-squares solution of the normal equations,
 * solved here in double.
 *
 * The data: w = (2, -1, 0.5), b = 3, plus N(0, 0.1²) noise. It prints both
 * solutions, the largest difference between them, and how many heap
 * allocations the training steps after the first made.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "qkv.h"

enum { N = 256, D = 3, STEPS = 600 };

/* Solves the (D+1)×(D+1) system A·s = r in place by Gaussian elimination
 * with partial pivoting. */
static void solve(double A[D + 1][D + 1], double *r, double *s)
{
    for (int c = 0; c <= D; c++) {
        int p = c;
        for (int i = c + 1; i <= D; i++)
            if (fabs(A[i][c]) > fabs(A[p][c]))
                p = i;
        for (int j = 0; j <= D; j++) {
            double tmp = A[c][j];
            A[c][j] = A[p][j];
            A[p][j] = tmp;
        }
        double tr = r[c];
        r[c] = r[p];
        r[p] = tr;
        for (int i = c + 1; i <= D; i++) {
            double f = A[i][c] / A[c][c];
            for (int j = c; j <= D; j++)
                A[i][j] -= f * A[c][j];
            r[i] -= f * r[c];
        }
    }
    for (int i = D; i >= 0; i--) {
        double v = r[i];
        for (int j = i + 1; j <= D; j++)
            v -= A[i][j] * s[j];
        s[i] = v / A[i][i];
    }
}

int main(int argc, char **argv)
{
    if (argc > 1) { /* it takes none: --help says what it does */
        const int help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0;
        if (!help) {
            char arg[256]; /* escaped: an argument cannot steer the terminal */
            qkv_escape(arg, sizeof arg, argv[1]);
            fprintf(stderr, "least_squares: unexpected argument '%s'\n", arg);
        }
        fprintf(help ? stdout : stderr,
                "usage: least_squares\n"
                "Fits a line through noisy points by gradient descent and checks the fit\n"
                "against the normal equations. It takes no arguments.\n");
        return help ? 0 : 2;
    }
    qkv_error err = qkv_error_none();
    int rc = 1;
    qkv_tensor *X = qkv_tensor_new(2, (const int[]){N, D}, 0, &err);
    qkv_tensor *y = qkv_tensor_new(2, (const int[]){N, 1}, 0, &err);
    qkv_tensor *w = qkv_tensor_new(2, (const int[]){D, 1}, 1, &err);
    qkv_tensor *b = qkv_tensor_new(1, (const int[]){1}, 1, &err);
    qkv_tensor *params[2] = {w, b};
    qkv_tape *t = qkv_tape_new(0, &err);
    qkv_optim_config oc = qkv_optim_defaults(QKV_ADAM);
    oc.lr = 0.05;
    qkv_optim *opt = t != NULL && err.status == QKV_OK ? qkv_optim_new(&oc, params, 2, &err) : NULL;
    if (opt == NULL) {
        fprintf(stderr, "least_squares: %s\n", err.message);
        goto done;
    }
    const double w_true[D] = {2, -1, 0.5}, b_true = 3;
    qkv_rng g;
    qkv_rng_seed(&g, 1);
    for (int i = 0; i < N; i++) {
        double v = b_true + qkv_rng_normalvariate(&g, 0, 0.1);
        for (int j = 0; j < D; j++) {
            X->data[i * D + j] = (qkv_real)qkv_rng_normalvariate(&g, 0, 1);
            v += w_true[j] * X->data[i * D + j];
        }
        y->data[i] = (qkv_real)v;
    }

    double loss = 0;
    size_t allocs = 0;
    for (int step = 1; step <= STEPS; step++) {
        if (step == 2)
            allocs = qkv_alloc_count();
        qkv_optim_zero_grad(opt);
        qkv_tape_reset(t);
        qkv_tensor *pred = qkv_add(t, qkv_matmul(t, X, w), b); /* (N, 1) */
        qkv_tensor *l = qkv_mse(t, pred, y);
        if (qkv_backward(t, l) != QKV_OK || qkv_optim_step(opt) != QKV_OK) {
            /* the tape's reason, else the optimizer's (a gradient or update not finite) */
            fprintf(stderr, "least_squares: step %d: %s\n", step,
                    qkv_tape_status(t) != QKV_OK ? qkv_tape_error(t) : qkv_optim_error(opt));
            goto done;
        }
        loss = l->data[0];
    }
    allocs = qkv_alloc_count() - allocs;

    /* the normal equations [XᵀX Xᵀ1; 1ᵀX N]·(w, b) = (Xᵀy, Σy), in double */
    double A[D + 1][D + 1] = {{0}}, r[D + 1] = {0}, s[D + 1];
    for (int i = 0; i < N; i++) {
        double row[D + 1];
        for (int j = 0; j < D; j++)
            row[j] = X->data[i * D + j];
        row[D] = 1;
        for (int j = 0; j <= D; j++) {
            r[j] += row[j] * y->data[i];
            for (int k = 0; k <= D; k++)
                A[j][k] += row[j] * row[k];
        }
    }
    solve(A, r, s);
    double worst = fabs(b->data[0] - s[D]);
    for (int j = 0; j < D; j++)
        worst = fmax(worst, fabs(w->data[j] - s[j]));
    printf("gradient descent: w = (%.4f, %.4f, %.4f), b = %.4f, mse %.5f\n", (double)w->data[0],
           (double)w->data[1], (double)w->data[2], (double)b->data[0], loss);
    printf("normal equations: w = (%.4f, %.4f, %.4f), b = %.4f\n", s[0], s[1], s[2], s[D]);
    printf("largest difference: %.2e\n", worst);
    printf("heap allocations in steps 2 to %d: %zu\n", STEPS, allocs);
    rc = worst < 1e-3 && allocs == 0 ? 0 : 1;
done:
    qkv_optim_free(opt);
    qkv_tape_free(t);
    qkv_tensor_free(X);
    qkv_tensor_free(y);
    qkv_tensor_free(w);
    qkv_tensor_free(b);
    return rc;
}
