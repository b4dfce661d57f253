/*
 * bench.c - `make bench`: matmul GFLOP/s, training-step time, the
 * backward/forward ratio and the peak RSS of `qkv train`. Prints a table and
 * writes out/bench.csv (section,name,value,unit). Timing lives here, never
 * in the test suite.
 *
 * OpenBLAS is loaded with dlopen when present, so neither the library nor
 * this program depends on it.
 */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "apps/coref.h"
#include "kernels/kernels.h" /* the benchmark times the private kernels too */
#include "qkv.h"
#include "util/util.h"

static FILE *csv;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void record(const char *section, const char *name, double value, const char *unit)
{
    if (csv != NULL)
        fprintf(csv, "%s,%s,%.6g,%s\n", section, name, value, unit);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median over `blocks` timed blocks of the time per call of fn(ctx), each
 * block running enough calls to last about min_block seconds. */
static double median_time(void (*fn)(void *), void *ctx, int blocks, double min_block)
{
    double t[32];
    long reps = 1;
    fn(ctx); /* warm up: first-touch, arena growth */
    for (;;) {
        double t0 = now();
        for (long r = 0; r < reps; r++)
            fn(ctx);
        double dt = now() - t0;
        if (dt >= min_block || reps > (1L << 24))
            break;
        reps = dt > 0 ? (long)(reps * fmin(100, 1.5 * min_block / dt)) + 1 : reps * 10;
    }
    for (int b = 0; b < blocks; b++) {
        double t0 = now();
        for (long r = 0; r < reps; r++)
            fn(ctx);
        t[b] = (now() - t0) / (double)reps;
    }
    qsort(t, (size_t)blocks, sizeof t[0], cmp_double);
    return t[blocks / 2];
}

/* ------------------------------------------------------------------------ */
/* matmul                                                                   */

typedef void (*sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha,
                         const float *a, int lda, const float *b, int ldb, float beta, float *c,
                         int ldc);

typedef struct mm_ctx {
    int n;
    float *a, *b, *c;
    sgemm_fn blas;
} mm_ctx;

static void mm_naive(void *p)
{
    mm_ctx *x = p;
    int n = x->n;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            float s = 0;
            for (int k = 0; k < n; k++)
                s += x->a[i * n + k] * x->b[k * n + j];
            x->c[i * n + j] = s;
        }
}

static void mm_qkv(void *p)
{
    mm_ctx *x = p;
    qkv_gemm(0, 0, x->n, x->n, x->n, x->a, x->b, x->c, 0);
}

static void mm_blas(void *p)
{
    mm_ctx *x = p;
    /* CblasRowMajor = 101, CblasNoTrans = 111 */
    x->blas(101, 111, 111, x->n, x->n, x->n, 1.0f, x->a, x->n, x->b, x->n, 0.0f, x->c, x->n);
}

static char blas_core[64] = "absent";

static sgemm_fn load_openblas(void)
{
    static const char *names[] = {"libopenblas.so.0", "libopenblas.so"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h == NULL)
            continue;
        /* POSIX dlsym returns an object pointer; copy it into a function pointer */
        void (*set_threads)(int) = NULL;
        sgemm_fn f = NULL;
        void *sym = dlsym(h, "openblas_set_num_threads");
        memcpy(&set_threads, &sym, sizeof sym);
        sym = dlsym(h, "cblas_sgemm");
        memcpy(&f, &sym, sizeof sym);
        if (f == NULL)
            continue;
        if (set_threads != NULL)
            set_threads(1);
        char *(*corename)(void) = NULL;
        sym = dlsym(h, "openblas_get_corename");
        memcpy(&corename, &sym, sizeof sym);
        snprintf(blas_core, sizeof blas_core, "%s", corename ? corename() : "unknown");
        return f;
    }
    return NULL;
}

static void bench_matmul(void)
{
    static const int sizes[] = {64, 128, 256, 512, 1024};
    sgemm_fn blas = load_openblas();
    const char *impls[] = {"portable", "avx2", "avx512"};
    const char *chosen = qkv_kernels_name(); /* QKV_KERNELS, restored after each size */
    /* best/blas is of the sets up to the one in use: QKV_KERNELS=avx2 stands
     * in for a CPU without AVX-512, whose OpenBLAS kernel is Haswell's */
    const int top = strcmp(chosen, "portable") == 0 ? 0 : strcmp(chosen, "avx2") == 0 ? 1 : 2;
    printf(
        "Matmul GFLOP/s (square n×n·n×n, float32, one thread; qkv auto = %s; OpenBLAS core %s)\n",
        qkv_kernels_name(), blas_core);
    printf("%6s %8s %10s %8s %8s %10s %9s\n", "n", "naive", "portable", "avx2", "avx512",
           "openblas", "best/blas");
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int n = sizes[s];
        mm_ctx x = {n, malloc(sizeof(float) * n * n), malloc(sizeof(float) * n * n),
                    malloc(sizeof(float) * n * n), blas};
        for (int i = 0; i < n * n; i++) {
            x.a[i] = (float)((i * 7 % 13) - 6) / 7.0f;
            x.b[i] = (float)((i * 5 % 11) - 5) / 5.0f;
        }
        double flop = 2.0 * n * n * n, best = 0;
        char name[32];
        double naive =
            flop / median_time(mm_naive, &x, n >= 512 ? 1 : 3, n >= 512 ? 0 : 0.05) / 1e9;
        snprintf(name, sizeof name, "naive_%d", n);
        record("matmul", name, naive, "GFLOP/s");
        printf("%6d %8.2f", n, naive);
        for (int i = 0; i < 3; i++) {
            if (qkv_kernels_use(impls[i], NULL) != 0) {
                printf(" %*s", i == 0 ? 10 : 8, "-");
                continue;
            }
            double g = flop / median_time(mm_qkv, &x, 5, 0.1) / 1e9;
            if (i <= top)
                best = fmax(best, g);
            snprintf(name, sizeof name, "qkv_%s_%d", impls[i], n);
            record("matmul", name, g, "GFLOP/s");
            printf(" %*.2f", i == 0 ? 10 : 8, g);
        }
        qkv_kernels_use(chosen, NULL);
        if (blas != NULL) {
            double g = flop / median_time(mm_blas, &x, 5, 0.1) / 1e9;
            /* sanity: both libraries compute the same product */
            float *mine = malloc(sizeof(float) * n * n);
            qkv_gemm(0, 0, n, n, n, x.a, x.b, mine, 0);
            mm_blas(&x);
            double worst = 0;
            for (int i = 0; i < n * n; i++)
                worst = fmax(worst, fabs((double)mine[i] - x.c[i]) / (1 + fabs((double)x.c[i])));
            free(mine);
            if (worst > 1e-3)
                printf("  (qkv and OpenBLAS disagree: max rel diff %.2g)\n", worst);
            snprintf(name, sizeof name, "openblas_%d", n);
            record("matmul", name, g, "GFLOP/s");
            snprintf(name, sizeof name, "ratio_best_over_openblas_%d", n);
            record("matmul", name, best / g, "ratio");
            printf(" %10.2f %8.0f%%\n", g, 100 * best / g);
        } else {
            printf(" %10s %9s\n", "absent", "-");
        }
        free(x.a);
        free(x.b);
        free(x.c);
    }
    if (blas == NULL)
        printf("(OpenBLAS not found: apt-get install libopenblas0-pthread to compare)\n");
}

/* ------------------------------------------------------------------------ */
/* gemm: every kernel set against OpenBLAS, shape by shape                 */

typedef struct gemm_shape {
    const char *what; /* where the shape comes from */
    int m, n, k, ta, tb;
} gemm_shape;

typedef struct gemm_ctx {
    const gemm_shape *s;
    float *a, *b, *c;
    sgemm_fn blas;
} gemm_ctx;

static void gemm_qkv(void *p)
{
    gemm_ctx *x = p;
    const gemm_shape *s = x->s;
    qkv_gemm(s->ta, s->tb, s->m, s->n, s->k, x->a, x->b, x->c, 0);
}

static void gemm_blas(void *p)
{
    gemm_ctx *x = p;
    const gemm_shape *s = x->s;
    /* CblasRowMajor = 101, CblasNoTrans = 111, CblasTrans = 112 */
    x->blas(101, s->ta ? 112 : 111, s->tb ? 112 : 111, s->m, s->n, s->k, 1.0f, x->a,
            s->ta ? s->m : s->k, x->b, s->tb ? s->k : s->n, 0.0f, x->c, s->n);
}

/* The square sizes of issue 15 in all four transpose variants, its thin
 * attention shapes, and the products of `bench block` (one Transformer
 * block's step, as one M = B·T product and as the per-item calls). */
static const gemm_shape gemm_shapes[] = {
    {"square", 32, 32, 32, 0, 0},        {"square", 32, 32, 32, 0, 1},
    {"square", 32, 32, 32, 1, 0},        {"square", 32, 32, 32, 1, 1},
    {"square", 64, 64, 64, 0, 0},        {"square", 64, 64, 64, 0, 1},
    {"square", 64, 64, 64, 1, 0},        {"square", 64, 64, 64, 1, 1},
    {"square", 128, 128, 128, 0, 0},     {"square", 128, 128, 128, 0, 1},
    {"square", 128, 128, 128, 1, 0},     {"square", 128, 128, 128, 1, 1},
    {"square", 256, 256, 256, 0, 0},     {"square", 256, 256, 256, 0, 1},
    {"square", 256, 256, 256, 1, 0},     {"square", 256, 256, 256, 1, 1},
    {"square", 512, 512, 512, 0, 0},     {"square", 512, 512, 512, 0, 1},
    {"square", 512, 512, 512, 1, 0},     {"square", 512, 512, 512, 1, 1},
    {"thin", 16, 512, 16, 0, 1},         {"thin", 32, 4096, 32, 0, 1},
    {"thin", 32, 4096, 32, 1, 1},        {"thin", 47, 64, 64, 0, 0},
    {"thin", 48, 64, 64, 0, 0},          {"thin", 47, 64, 64, 0, 1},
    {"thin", 48, 64, 64, 0, 1},          {"thin", 47, 64, 64, 1, 0},
    {"thin", 48, 64, 64, 1, 0},          {"thin", 47, 64, 64, 1, 1},
    {"thin", 48, 64, 64, 1, 1},          {"block fwd", 2048, 384, 128, 0, 0},
    {"block fwd", 2048, 128, 128, 0, 0}, {"block fwd", 2048, 512, 128, 0, 0},
    {"block fwd", 2048, 128, 512, 0, 0}, {"block dX", 2048, 128, 384, 0, 1},
    {"block dX", 2048, 128, 128, 0, 1},  {"block dX", 2048, 128, 512, 0, 1},
    {"block dX", 2048, 512, 128, 0, 1},  {"block dW", 128, 384, 2048, 1, 0},
    {"block dW", 128, 128, 2048, 1, 0},  {"block dW", 128, 512, 2048, 1, 0},
    {"block dW", 512, 128, 2048, 1, 0},  {"item fwd", 64, 384, 128, 0, 0},
    {"item fwd", 64, 128, 512, 0, 0},    {"item dX", 64, 128, 384, 0, 1},
    {"item dX", 64, 512, 128, 0, 1},     {"item dW", 128, 384, 64, 1, 0},
    {"item dW", 512, 128, 64, 1, 0},     {"attn QK", 64, 64, 32, 0, 1},
    {"attn AV", 64, 32, 64, 0, 0},       {"attn dA", 64, 64, 32, 0, 1},
    {"attn dV", 64, 32, 64, 1, 0},       {"attn dK", 64, 32, 64, 1, 0},
};

/* GFLOP/s of fn on x's shape: the median of 5 timed blocks. */
static double gemm_rate(gemm_ctx *x, void (*fn)(void *))
{
    const gemm_shape *s = x->s;
    double flop = 2.0 * s->m * s->n * s->k;
    double min_block = flop > 1e8 ? 0.05 : 0.02;
    return flop / median_time(fn, x, 5, min_block) / 1e9;
}

/* The table; only the kernel set called only when it is not NULL. */
static void bench_gemm(const char *only)
{
    const char *sets[] = {"portable", "avx2", "avx512"};
    const char *chosen = qkv_kernels_name(); /* QKV_KERNELS, restored after each shape */
    sgemm_fn blas = load_openblas();
    printf("GEMM GFLOP/s (float32, one thread, C = op(A)·op(B); OpenBLAS core %s;\n"
           "t = transposed; ratios are each vector set over OpenBLAS)\n",
           blas_core);
    printf("%-10s %5s %5s %5s %2s %9s %8s %8s %9s %8s %8s\n", "shape", "m", "n", "k", "op",
           "portable", "avx2", "avx512", "openblas", "avx2/ob", "512/ob");
    for (size_t i = 0; i < sizeof gemm_shapes / sizeof gemm_shapes[0]; i++) {
        const gemm_shape *s = &gemm_shapes[i];
        size_t na = (size_t)s->m * s->k, nb = (size_t)s->k * s->n, nc = (size_t)s->m * s->n;
        gemm_ctx x = {s, malloc(sizeof(float) * na), malloc(sizeof(float) * nb),
                      malloc(sizeof(float) * nc), blas};
        float *mine = malloc(sizeof(float) * nc);
        if (x.a == NULL || x.b == NULL || x.c == NULL || mine == NULL) {
            fprintf(stderr, "bench: out of memory\n");
            exit(1);
        }
        for (size_t j = 0; j < na; j++)
            x.a[j] = (float)((int)(j * 7 % 13) - 6) / 7.0f;
        for (size_t j = 0; j < nb; j++)
            x.b[j] = (float)((int)(j * 5 % 11) - 5) / 5.0f;
        char op[3] = {s->ta ? 't' : 'n', s->tb ? 't' : 'n', 0}, name[64];
        printf("%-10s %5d %5d %5d %2s", s->what, s->m, s->n, s->k, op);
        double g[3] = {0, 0, 0}, ob = 0;
        for (int j = 0; j < 3; j++) {
            if ((only != NULL && strcmp(only, sets[j]) != 0) ||
                qkv_kernels_use(sets[j], NULL) != QKV_OK) {
                printf(" %*s", j == 0 ? 9 : 8, "-");
                continue;
            }
            g[j] = gemm_rate(&x, gemm_qkv);
            printf(" %*.1f", j == 0 ? 9 : 8, g[j]);
            snprintf(name, sizeof name, "%dx%dx%d_%s_%s", s->m, s->n, s->k, op, sets[j]);
            record("gemm", name, g[j], "GFLOP/s");
        }
        qkv_kernels_use(chosen, NULL);
        if (blas != NULL) {
            ob = gemm_rate(&x, gemm_blas);
            gemm_qkv(&x);
            memcpy(mine, x.c, sizeof(float) * nc);
            gemm_blas(&x);
            double worst = 0;
            for (size_t j = 0; j < nc; j++)
                worst = fmax(worst, fabs((double)mine[j] - x.c[j]) / (1 + fabs((double)x.c[j])));
            snprintf(name, sizeof name, "%dx%dx%d_%s_openblas", s->m, s->n, s->k, op);
            record("gemm", name, ob, "GFLOP/s");
            printf(" %9.1f", ob);
            for (int j = 1; j < 3; j++) /* a set not run has no ratio */
                if (g[j] > 0)
                    printf(" %7.0f%%", 100 * g[j] / ob);
                else
                    printf(" %8s", "-");
            printf("%s\n", worst > 1e-3 ? "  (qkv and OpenBLAS disagree)" : "");
        } else {
            printf(" %9s\n", "absent");
        }
        free(mine);
        free(x.a);
        free(x.b);
        free(x.c);
    }
}

/* ------------------------------------------------------------------------ */
/* training step                                                            */

typedef struct step_ctx {
    qkv_coref_model *m;
    qkv_optim *o;
    qkv_tape *t;
    qkv_coref_batch *b;
} step_ctx;

static void run_step(void *p)
{
    step_ctx *c = p;
    qkv_coref_out f;
    if (qkv_coref_train_step(c->m, c->o, c->t, c->b, &f) != QKV_OK) {
        fprintf(stderr, "bench: step failed: %s\n", qkv_tape_error(c->t));
        exit(1);
    }
}

static void run_forward(void *p)
{
    step_ctx *c = p;
    qkv_coref_out f;
    qkv_tape_reset(c->t);
    qkv_coref_forward(c->m, c->t, c->b, &f);
}

static void run_forward_backward(void *p)
{
    step_ctx *c = p;
    qkv_coref_out f;
    qkv_tape_reset(c->t);
    qkv_coref_forward(c->m, c->t, c->b, &f);
    qkv_backward(c->t, f.loss);
}

typedef struct config {
    const char *name;
    int B, T, V, d_k;
} config;

/* The model of one configuration, Adam, and a batch of random sentences of
 * full length. */
static void make_step_ctx(step_ctx *c, const config *g)
{
    qkv_coref_config mc = {g->V, g->d_k, 12, 1, 0.1, 1};
    *c = (step_ctx){qkv_coref_model_new(&mc, NULL), NULL, qkv_tape_new(0, NULL),
                    qkv_coref_batch_new(g->B, g->T, NULL)};
    qkv_optim_config oc = qkv_optim_defaults(QKV_ADAM);
    oc.lr = 1e-3;
    c->o = qkv_optim_new(&oc, c->m->params, QKV_COREF_PARAMS, NULL);
    qkv_rng r;
    qkv_rng_seed(&r, 7);
    int ids[256];
    for (int b = 0; b < g->B; b++) {
        for (int t = 0; t < g->T; t++)
            ids[t] = 1 + (int)qkv_rng_below(&r, (uint64_t)g->V - 1);
        qkv_coref_batch_add(c->b, ids, g->T, (int)qkv_rng_below(&r, (uint64_t)g->T),
                            (int)qkv_rng_below(&r, 12), -1);
    }
}

static void free_step_ctx(step_ctx *c)
{
    qkv_coref_batch_free(c->b);
    qkv_tape_free(c->t);
    qkv_optim_free(c->o);
    qkv_coref_model_free(c->m);
}

static void bench_real(const char *batches_path);

/* Where the real workload's batches go for scripts/bench_torch.py. */
static char real_batches_path[4096] = "out/bench_batches.csv";

/* The length sweep: the step at B 32, d_k 64, V 64 for T = 16 to 256, and
 * the exponent of a least-squares fit of ln(time) against ln T; only one
 * length when only_t > 0 (for profiling), without the fit. */
static void bench_lengths(int only_t)
{
    static const int Ts[] = {16, 32, 64, 128, 256};
    enum { NT = sizeof Ts / sizeof Ts[0] };
    double lt[NT], ly[NT];
    printf("\nLength sweep: B 32, d_k 64, V 64, full-length sentences\n");
    printf("%-5s %12s %12s %12s %9s\n", "T", "step (µs)", "fwd (µs)", "bwd (µs)", "bwd/fwd");
    for (int i = 0; i < NT; i++) {
        if (only_t > 0 && Ts[i] != only_t)
            continue;
        char name[16];
        snprintf(name, sizeof name, "T%d", Ts[i]);
        const config g = {name, 32, Ts[i], 64, 64};
        step_ctx c;
        make_step_ctx(&c, &g);
        double step = median_time(run_step, &c, 7, 0.2);
        double fwd = median_time(run_forward, &c, 7, 0.2);
        double bwd = median_time(run_forward_backward, &c, 7, 0.2) - fwd;
        printf("%-5d %12.1f %12.1f %12.1f %9.2f\n", Ts[i], step * 1e6, fwd * 1e6, bwd * 1e6,
               bwd / fwd);
        char key[32];
        snprintf(key, sizeof key, "%s_step", name);
        record("train", key, step * 1e6, "us");
        lt[i] = log(Ts[i]);
        ly[i] = log(step);
        free_step_ctx(&c);
    }
    if (only_t > 0)
        return;
    double mx = 0, my = 0, sxy = 0, sxx = 0;
    for (int i = 0; i < NT; i++) {
        mx += lt[i] / NT;
        my += ly[i] / NT;
    }
    for (int i = 0; i < NT; i++) {
        sxy += (lt[i] - mx) * (ly[i] - my);
        sxx += (lt[i] - mx) * (lt[i] - mx);
    }
    printf("time grows as T^%.2f (least squares of ln time on ln T)\n", sxy / sxx);
    record("train", "length_exponent", sxy / sxx, "exponent");
}

static void bench_steps(const char *only)
{
    static const config cfgs[] = {
        {"S", 32, 12, 48, 16}, {"M", 32, 12, 48, 256}, {"L", 256, 16, 64, 512}};
    printf("\nTraining step (forward + backward + Adam), median of 7 blocks; 12 classes\n");
    printf("%-3s %5s %4s %4s %5s %12s %12s %12s %9s %10s\n", "cfg", "B", "T", "V", "d_k",
           "step (µs)", "fwd (µs)", "bwd (µs)", "bwd/fwd", "tape (KiB)");
    if (only == NULL || strcmp(only, "R") == 0)
        bench_real(real_batches_path);
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        const config *g = &cfgs[i];
        if (only != NULL && strcmp(only, g->name) != 0)
            continue;
        step_ctx c;
        make_step_ctx(&c, g);
        double step = median_time(run_step, &c, 7, 0.2);
        double fwd = median_time(run_forward, &c, 7, 0.2);
        double fb = median_time(run_forward_backward, &c, 7, 0.2);
        double bwd = fb - fwd;
        printf("%-3s %5d %4d %4d %5d %12.1f %12.1f %12.1f %9.2f %10.0f\n", g->name, g->B, g->T,
               g->V, g->d_k, step * 1e6, fwd * 1e6, bwd * 1e6, bwd / fwd,
               qkv_tape_high_water(c.t) / 1024.0);
        char name[32];
        snprintf(name, sizeof name, "%s_step", g->name);
        record("train", name, step * 1e6, "us");
        snprintf(name, sizeof name, "%s_forward", g->name);
        record("train", name, fwd * 1e6, "us");
        snprintf(name, sizeof name, "%s_backward", g->name);
        record("train", name, bwd * 1e6, "us");
        snprintf(name, sizeof name, "%s_bwd_over_fwd", g->name);
        record("train", name, bwd / fwd, "ratio");
        free_step_ctx(&c);
    }
    if (only == NULL || strcmp(only, "T") == 0)
        bench_lengths(0);
    else if (only[0] == 'T') /* `bench steps T256`: one length of the sweep */
        bench_lengths(atoi(only + 1));
}

/* ------------------------------------------------------------------------ */
/* the real workload: the batches `qkv train` draws                         */

#define REAL_BATCHES 64

/* `qkv train`'s model, optimiser and first REAL_BATCHES batches (its
 * defaults: levels 1-3, seed 1, d_k 16, init std 0.1, Adam lr 0.05, batch
 * 32, padded to each batch's longest sentence); a step takes the next. */
typedef struct real_ctx {
    step_ctx c;
    qkv_coref_batch *b[REAL_BATCHES];
    int next;
} real_ctx;

static void real_next(real_ctx *r)
{
    r->c.b = r->b[r->next];
    r->next = (r->next + 1) % REAL_BATCHES;
}

static void run_real_step(void *p)
{
    real_ctx *r = p;
    real_next(r);
    run_step(&r->c);
}

static void run_real_forward(void *p)
{
    real_ctx *r = p;
    real_next(r);
    run_forward(&r->c);
}

static void run_real_forward_backward(void *p)
{
    real_ctx *r = p;
    real_next(r);
    run_forward_backward(&r->c);
}

/* Writes the batches for scripts/bench_torch.py: a line "meta,V,d_k,
 * classes", then per item "batch,item,len,query,target,ids" with the ids
 * space-separated, padded with 0 to the batch's T. */
static void write_real_batches(const real_ctx *r, const char *path)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "bench: cannot write %s; PyTorch will skip the real workload\n", path);
        return;
    }
    fprintf(f, "meta,%d,%d,%d\n", r->c.m->cfg.vocab, r->c.m->cfg.d_k, r->c.m->cfg.classes);
    for (int k = 0; k < REAL_BATCHES; k++) {
        const qkv_coref_batch *b = r->b[k];
        for (int i = 0; i < b->B; i++) {
            fprintf(f, "%d,%d,%d,%d,%d,", k, i, b->len[i], b->query[i], b->target[i]);
            for (int t = 0; t < b->T; t++)
                fprintf(f, "%s%d", t ? " " : "", b->ids[(size_t)i * b->cap_t + t]);
            fputc('\n', f);
        }
    }
    fclose(f);
}

static void bench_real(const char *batches_path)
{
    real_ctx r = {0};
    qkv_coref_data d;
    qkv_error err;
    if (qkv_coref_data_build(&d, QKV_COREF_ALL_LEVELS, 1, &err) != QKV_OK) {
        fprintf(stderr, "bench: %s\n", err.message);
        exit(1);
    }
    qkv_coref_config mc = {qkv_coref_vocab_size(), 16, qkv_coref_classes(), 1, 0.1, 1};
    r.c.m = qkv_coref_model_new(&mc, NULL);
    qkv_optim_config oc = qkv_optim_defaults(QKV_ADAM);
    oc.lr = 0.05;
    r.c.o = qkv_optim_new(&oc, r.c.m->params, QKV_COREF_PARAMS, NULL);
    r.c.t = qkv_tape_new(0, NULL);
    if (r.c.m != NULL) /* as qkv train's steps: the pronoun's rows only */
        r.c.m->rows_only = getenv("QKV_BENCH_ALLROWS") == NULL;
    int *order = malloc(sizeof *order * (size_t)d.n_train), pos = 0, tmin = 1 << 30, tmax = 0;
    if (r.c.m == NULL || r.c.o == NULL || r.c.t == NULL || order == NULL) {
        fprintf(stderr, "bench: out of memory\n");
        exit(1);
    }
    for (int i = 0; i < d.n_train; i++)
        order[i] = i;
    qkv_rng g;
    qkv_rng_seed(&g, 2); /* qkv_coref_fit's batch seed: train's seed + 1 */
    double tsum = 0;
    for (int k = 0; k < REAL_BATCHES; k++) {
        r.b[k] = qkv_coref_batch_new(32, QKV_COREF_MAX_TOKENS, NULL);
        if (r.b[k] == NULL) {
            fprintf(stderr, "bench: out of memory\n");
            exit(1);
        }
        qkv_coref_draw_batch(&g, r.b[k], d.train, order, d.n_train, &pos);
        tmin = r.b[k]->T < tmin ? r.b[k]->T : tmin;
        tmax = r.b[k]->T > tmax ? r.b[k]->T : tmax;
        tsum += r.b[k]->T;
    }
    free(order);
    qkv_coref_data_free(&d);
    if (batches_path != NULL)
        write_real_batches(&r, batches_path);
    double step = median_time(run_real_step, &r, 7, 0.2);
    double fwd = median_time(run_real_forward, &r, 7, 0.2);
    double bwd = median_time(run_real_forward_backward, &r, 7, 0.2) - fwd;
    printf("%-3s %5d %4s %4d %5d %12.1f %12.1f %12.1f %9.2f   (T %d-%d, mean %.1f: the first %d "
           "batches of qkv train)\n",
           "R", 32, "pad", mc.vocab, mc.d_k, step * 1e6, fwd * 1e6, bwd * 1e6, bwd / fwd, tmin,
           tmax, tsum / REAL_BATCHES, REAL_BATCHES);
    record("train", "R_step", step * 1e6, "us");
    record("train", "R_forward", fwd * 1e6, "us");
    record("train", "R_backward", bwd * 1e6, "us");
    record("train", "R_bwd_over_fwd", bwd / fwd, "ratio");
    for (int k = 0; k < REAL_BATCHES; k++)
        qkv_coref_batch_free(r.b[k]);
    r.c.b = NULL;
    free_step_ctx(&r.c);
}

/* The step again with threads (qkv_threads_use): same results, and the
 * work split only where a thread gets enough of it. */
static void bench_threads(void)
{
    static const config cfgs[] = {
        {"S", 32, 12, 48, 16}, {"M", 32, 12, 48, 256}, {"L", 256, 16, 64, 512}};
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n = cores > 1 ? (int)(cores < 8 ? cores : 8) : 2;
    printf("\nTraining step with %d threads (qkv_threads_use; %ld cores online)\n", n, cores);
    printf("%-3s %12s %12s\n", "cfg", "step (µs)", "vs 1 thread");
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        const config *g = &cfgs[i];
        double t[2];
        for (int k = 0; k < 2; k++) {
            qkv_threads_use(k == 0 ? 1 : n, NULL);
            step_ctx c;
            make_step_ctx(&c, g);
            t[k] = median_time(run_step, &c, 7, 0.2);
            free_step_ctx(&c);
        }
        qkv_threads_use(1, NULL);
        printf("%-3s %12.1f %11.2fx\n", g->name, t[1] * 1e6, t[0] / t[1]);
        char name[32];
        snprintf(name, sizeof name, "%s_step_threads_%d", g->name, n);
        record("train", name, t[1] * 1e6, "us");
    }
}

/* ------------------------------------------------------------------------ */
/* the machine's peak FLOP rate                                             */

/* Independent FMA chains, 16 of them (more than latency x ports on any
 * current core), each a register of float32 lanes: the rate no kernel can
 * beat. Built for each instruction set here with a target attribute and
 * run only where the CPU has it. AVX2 has 16 vector registers: 12 chains
 * and the two constants fit (16 chains spilled, and measured 55 GFLOP/s
 * on an AMD EPYC where AVX2 GEMM ran at 90). */
enum { CHAINS_256 = 12 };
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
__attribute__((target("avx512f"))) static float fma_chains_512(long n)
{
    __m512 a[16], x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < 16; i++)
        a[i] = _mm512_set1_ps((float)i);
    for (long k = 0; k < n; k++)
        for (int i = 0; i < 16; i++)
            a[i] = _mm512_fmadd_ps(a[i], x, y);
    for (int i = 1; i < 16; i++)
        a[0] = _mm512_add_ps(a[0], a[i]);
    return _mm512_reduce_add_ps(a[0]);
}
__attribute__((target("avx2,fma"))) static float fma_chains_256(long n)
{
    __m256 a[CHAINS_256], x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < CHAINS_256; i++)
        a[i] = _mm256_set1_ps((float)i);
    for (long k = 0; k < n; k++)
        for (int i = 0; i < CHAINS_256; i++)
            a[i] = _mm256_fmadd_ps(a[i], x, y);
    for (int i = 1; i < CHAINS_256; i++)
        a[0] = _mm256_add_ps(a[0], a[i]);
    float o[8];
    _mm256_storeu_ps(o, a[0]);
    return o[0];
}
#endif

static volatile float peak_sink;

/* The best FLOP rate (GFLOP/s) of one core over 5 runs of each set the CPU
 * has, but not AVX-512 when the kernels in use are the AVX2 set (which stands
 * in for a CPU without AVX-512, as QKV_KERNELS=avx2 does); the set's name
 * in *which. */
static double measure_peak(const char **which)
{
    double best = 0;
    *which = "none";
#if defined(__x86_64__) && defined(__GNUC__)
    const long n = 4000000;
    const int avx512 = strcmp(qkv_kernels_name(), "avx2") != 0;
    for (int r = 0; r < 5; r++) {
        if (avx512 && __builtin_cpu_supports("avx512f")) {
            double t0 = now();
            peak_sink = fma_chains_512(n);
            double g = 16.0 * 16 * 2 * (double)n / (now() - t0) / 1e9;
            if (g > best)
                best = g, *which = "AVX-512 FMA";
        }
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
            double t0 = now();
            peak_sink = fma_chains_256(n);
            double g = CHAINS_256 * 8.0 * 2 * (double)n / (now() - t0) / 1e9;
            if (g > best)
                best = g, *which = "AVX2 FMA";
        }
    }
#endif
    return best;
}

/* ------------------------------------------------------------------------ */
/* a Transformer block                                                      */

enum { BLK_B = 32, BLK_T = 64, BLK_D = 128, BLK_H = 4, BLK_F = 512 };

typedef struct block_ctx {
    qkv_params *p;
    qkv_block blk;
    qkv_optim *o;
    qkv_tape *t;
    qkv_tensor *x, *target;
} block_ctx;

static qkv_tensor *block_loss(block_ctx *c)
{
    qkv_tensor *y = qkv_block_forward(c->t, &c->blk, c->x, NULL, NULL);
    return qkv_mse(c->t, y, c->target);
}

static void run_block_forward(void *p)
{
    block_ctx *c = p;
    qkv_tape_reset(c->t);
    block_loss(c);
}

static void run_block_forward_backward(void *p)
{
    block_ctx *c = p;
    qkv_params_zero_grad(c->p);
    qkv_tape_reset(c->t);
    qkv_backward(c->t, block_loss(c));
}

static void run_block_step(void *p)
{
    block_ctx *c = p;
    qkv_params_zero_grad(c->p);
    qkv_tape_reset(c->t);
    if (qkv_backward(c->t, block_loss(c)) != QKV_OK || qkv_optim_step(c->o) != QKV_OK) {
        fprintf(stderr, "bench: block step failed: %s\n", qkv_tape_error(c->t));
        exit(1);
    }
}

/* The multiply-adds of one step, times 2: the forward's matrix products
 * (QKV, output projection, FFN up and down, and Q·Kᵀ and A·V over every
 * key, as PyTorch computes them without skipping the causal half), and the
 * backward's two products (for the input and for the weight) per forward
 * one. Element-wise work, softmax, norms and AdamW are not counted. */
static double block_flops(void)
{
    const double n = (double)BLK_B * BLK_T, d = BLK_D, f = BLK_F;
    const double dense = 2 * n * (d * 3 * d + d * d + d * f + f * d);
    const double attn = 2 * 2 * (double)BLK_B * BLK_H * BLK_T * BLK_T * (d / BLK_H);
    return 3 * (dense + attn);
}

static void bench_block(void)
{
    block_ctx c = {0};
    c.p = qkv_params_new(1, NULL);
    c.t = qkv_tape_new(0, NULL);
    if (c.p == NULL || c.t == NULL ||
        qkv_block_init(&c.blk, c.p, "block", BLK_D, BLK_H, BLK_F, 1, NULL) != QKV_OK) {
        fprintf(stderr, "bench: cannot build the block\n");
        exit(1);
    }
    const int shape[3] = {BLK_B, BLK_T, BLK_D};
    c.x = qkv_tensor_new(3, shape, 0, NULL);
    c.target = qkv_tensor_new(3, shape, 0, NULL);
    qkv_rng g;
    qkv_rng_seed(&g, 3);
    for (size_t i = 0; i < c.x->numel; i++) {
        c.x->data[i] = (qkv_real)qkv_rng_normalvariate(&g, 0, 1);
        c.target->data[i] = (qkv_real)qkv_rng_normalvariate(&g, 0, 1);
    }
    qkv_optim_config oc = qkv_optim_defaults(QKV_ADAMW);
    oc.lr = 1e-3;
    c.o = qkv_params_optim(c.p, &oc, NULL);
    run_block_step(&c);
    run_block_step(&c);
    const size_t before = qkv_alloc_count();
    for (int i = 0; i < 3; i++)
        run_block_step(&c);
    const size_t allocs = qkv_alloc_count() - before;
    const char *which;
    const double peak = measure_peak(&which);
    const double step = median_time(run_block_step, &c, 7, 0.3);
    const double fwd = median_time(run_block_forward, &c, 7, 0.3);
    const double fb = median_time(run_block_forward_backward, &c, 7, 0.3);
    const double flops = block_flops(), rate = flops / step / 1e9;
    printf("\nTransformer block step (B %d, T %d, d_model %d, %d heads, FFN %d, causal; "
           "forward + backward + AdamW; one thread; %s kernels)\n",
           BLK_B, BLK_T, BLK_D, BLK_H, BLK_F, qkv_kernels_name());
    printf("%12s %12s %12s %9s %10s %12s %10s %8s\n", "step (ms)", "fwd (ms)", "bwd (ms)",
           "bwd/fwd", "GFLOP", "GFLOP/s", "% of peak", "allocs");
    printf("%12.2f %12.2f %12.2f %9.2f %10.3f %12.1f %9.1f%% %8zu\n", step * 1e3, fwd * 1e3,
           (fb - fwd) * 1e3, (fb - fwd) / fwd, flops / 1e9, rate, 100 * rate / peak, allocs);
    printf("peak of one core: %.1f GFLOP/s (%s, %d independent chains)\n", peak, which,
           strcmp(which, "AVX2 FMA") == 0 ? CHAINS_256 : 16);
    record("block", "block_step", step * 1e6, "us");
    record("block", "block_forward", fwd * 1e6, "us");
    record("block", "block_backward", (fb - fwd) * 1e6, "us");
    record("block", "block_bwd_over_fwd", (fb - fwd) / fwd, "ratio");
    record("block", "block_gflop", flops / 1e9, "GFLOP");
    record("block", "block_gflops", rate, "GFLOP/s");
    record("block", "peak_gflops", peak, "GFLOP/s");
    record("block", "block_fraction_of_peak", rate / peak, "ratio");
    record("block", "block_allocs_per_3_steps", (double)allocs, "count");
    qkv_optim_free(c.o);
    qkv_tensor_free(c.x);
    qkv_tensor_free(c.target);
    qkv_tape_free(c.t);
    qkv_params_free(c.p);
}

/* ------------------------------------------------------------------------ */
/* a tanh RNN step, as a user of qkv's layers writes it                     */

enum { RNN_B = 32, RNN_T = 64, RNN_H = 128, RNN_E = 128, RNN_V = 64, RNN_C = 12 };

typedef struct rnn_ctx {
    qkv_params *p;
    qkv_embedding emb;
    qkv_rnn cell;
    qkv_linear out;
    qkv_optim *o;
    qkv_tape *t;
    int ids[RNN_T * RNN_B]; /* time-major: step s's tokens are ids + s·B */
    int target[RNN_B];
    int tokens; /* 1: qkv_rnn_forward_ids, which projects the 64-row table once */
} rnn_ctx;

/* Embedding, 64 tanh steps from a zero state (the sequence form, as
 * nn.RNN runs them), the last state into 12 classes, cross-entropy; or
 * the same model through qkv_rnn_forward_ids. */
static qkv_tensor *rnn_loss(rnn_ctx *c)
{
    qkv_tensor *h;
    if (c->tokens) {
        h = qkv_rnn_forward_ids(c->t, &c->cell, c->emb.weight, c->ids, RNN_T, RNN_B, NULL, NULL);
    } else {
        qkv_tensor *x = qkv_embedding_forward(c->t, &c->emb, c->ids, 2,
                                              (const int[]){RNN_T, RNN_B}); /* [T,B,E] */
        h = qkv_rnn_forward(c->t, &c->cell, x, NULL, NULL);
    }
    return qkv_cross_entropy(c->t, qkv_linear_forward(c->t, &c->out, h), c->target);
}

static void run_rnn_forward(void *p)
{
    rnn_ctx *c = p;
    qkv_tape_reset(c->t);
    rnn_loss(c);
}

static void run_rnn_forward_backward(void *p)
{
    rnn_ctx *c = p;
    qkv_params_zero_grad(c->p);
    qkv_tape_reset(c->t);
    qkv_backward(c->t, rnn_loss(c));
}

static void run_rnn_step(void *p)
{
    rnn_ctx *c = p;
    qkv_params_zero_grad(c->p);
    qkv_tape_reset(c->t);
    if (qkv_backward(c->t, rnn_loss(c)) != QKV_OK || qkv_optim_step(c->o) != QKV_OK) {
        fprintf(stderr, "bench: RNN step failed: %s\n", qkv_tape_error(c->t));
        exit(1);
    }
}

static void bench_rnn(void)
{
    rnn_ctx *c = calloc(1, sizeof *c);
    c->p = qkv_params_new(1, NULL);
    c->t = qkv_tape_new(0, NULL);
    if (c->p == NULL || c->t == NULL ||
        qkv_embedding_init(&c->emb, c->p, "emb", RNN_V, RNN_E, NULL) != QKV_OK ||
        qkv_rnn_init(&c->cell, c->p, "rnn", RNN_E, RNN_H, QKV_RNN_TANH, NULL) != QKV_OK ||
        qkv_linear_init(&c->out, c->p, "out", RNN_H, RNN_C, 1, NULL) != QKV_OK) {
        fprintf(stderr, "bench: cannot build the RNN\n");
        exit(1);
    }
    qkv_rng g;
    qkv_rng_seed(&g, 5);
    for (int i = 0; i < RNN_T * RNN_B; i++)
        c->ids[i] = (int)qkv_rng_below(&g, RNN_V);
    for (int b = 0; b < RNN_B; b++)
        c->target[b] = (int)qkv_rng_below(&g, RNN_C);
    qkv_optim_config oc = qkv_optim_defaults(QKV_ADAM);
    oc.lr = 1e-3;
    c->o = qkv_params_optim(c->p, &oc, NULL);
    if (c->o == NULL) {
        fprintf(stderr, "bench: cannot build the optimiser\n");
        exit(1);
    }
    printf("\ntanh RNN step (B %d, T %d, %d token ids embedded in %d, hidden %d, %d classes; "
           "forward + backward + Adam; one thread)\n",
           RNN_B, RNN_T, RNN_V, RNN_E, RNN_H, RNN_C);
    printf("%-38s %12s %12s %12s %9s\n", "input", "step (µs)", "fwd (µs)", "bwd (µs)", "bwd/fwd");
    static const char *const forms[2] = {"embedding, then qkv_rnn_forward",
                                         "qkv_rnn_forward_ids (table projected)"};
    static const char *const keys[2] = {"rnn", "rnn_ids"};
    for (c->tokens = 0; c->tokens < 2; c->tokens++) {
        const double step = median_time(run_rnn_step, c, 7, 0.2);
        const double fwd = median_time(run_rnn_forward, c, 7, 0.2);
        const double bwd = median_time(run_rnn_forward_backward, c, 7, 0.2) - fwd;
        printf("%-38s %12.1f %12.1f %12.1f %9.2f\n", forms[c->tokens], step * 1e6, fwd * 1e6,
               bwd * 1e6, bwd / fwd);
        char key[32];
        snprintf(key, sizeof key, "%s_step", keys[c->tokens]);
        record("rnn", key, step * 1e6, "us");
        snprintf(key, sizeof key, "%s_forward", keys[c->tokens]);
        record("rnn", key, fwd * 1e6, "us");
        snprintf(key, sizeof key, "%s_backward", keys[c->tokens]);
        record("rnn", key, bwd * 1e6, "us");
    }
    qkv_optim_free(c->o);
    qkv_tape_free(c->t);
    qkv_params_free(c->p);
    free(c);
}

/* ------------------------------------------------------------------------ */
/* peak RSS                                                                 */

/* Peak RSS of `qkv train` in MB, or -1. A child's ru_maxrss includes what
 * it had before exec, which is the forking process's resident memory; so
 * this runs first, while the benchmark itself is small (about 1 MB, under
 * what train needs), and the figure is train's own. */
/* ------------------------------------------------------------------------ */
/* ops: element-wise maps, softmax and layer norm against memory bandwidth  */

typedef struct op_ctx {
    qkv_tape *t;
    qkv_tensor *x, *gamma, *beta; /* heap inputs (with gradients for layer norm) */
    const qkv_real *dy;           /* the seed gradient for forward + backward */
    qkv_tensor *(*map)(qkv_tape *, qkv_tensor *);
    void *src, *dst; /* memcpy */
    size_t bytes;
} op_ctx;

static void run_memcpy(void *p)
{
    op_ctx *c = p;
    memcpy(c->dst, c->src, c->bytes);
}

/* The op's forward pass alone, recording nothing (as under torch.no_grad). */
static void run_map(void *p)
{
    op_ctx *c = p;
    qkv_tape_reset(c->t);
    c->map(c->t, c->x);
}

/* Layer norm forward and backward from a fixed dy, gradients accumulating
 * into x, γ and β (as y.backward(dy) does in PyTorch). */
static void run_layer_norm(void *p)
{
    op_ctx *c = p;
    qkv_tape_reset(c->t);
    qkv_tensor *y = qkv_layer_norm(c->t, c->x, c->gamma, c->beta, 1e-5);
    qkv_backward_from(c->t, y, c->dy, y->numel);
}

static qkv_tensor *softmax_map(qkv_tape *t, qkv_tensor *x)
{
    return qkv_softmax(t, x);
}

/* One row of the ops table: µs per call, the bytes it must move, and its
 * time over the memcpy floor (those bytes at memcpy's rate). */
static void op_row(const char *name, const char *shape, double us, double mbytes, double gbps)
{
    const double floor_us = mbytes / gbps * 1e3; /* MB / (GB/s) is ms */
    printf("%-24s %-14s %10.1f %10.1f %10.1f %8.2f\n", name, shape, us, mbytes, floor_us,
           us / floor_us);
    char key[64];
    snprintf(key, sizeof key, "%s", name);
    record("ops", key, us, "us");
    snprintf(key, sizeof key, "%s_over_floor", name);
    record("ops", key, us / floor_us, "ratio");
}

static void bench_ops(void)
{
    enum { N = 1 << 20 };
    static const char *names[4] = {"exp", "tanh", "sigmoid", "gelu"};
    qkv_tensor *(*maps[4])(qkv_tape *, qkv_tensor *) = {qkv_exp, qkv_tanh, qkv_sigmoid, qkv_gelu};
    op_ctx c = {0};
    c.t = qkv_tape_new(64u << 20, NULL);
    c.bytes = (size_t)N * sizeof(float);
    c.src = malloc(c.bytes);
    c.dst = malloc(c.bytes);
    if (c.t == NULL || c.src == NULL || c.dst == NULL) {
        fprintf(stderr, "bench: out of memory\n");
        exit(1);
    }
    memset(c.src, 1, c.bytes);
    double mc = median_time(run_memcpy, &c, 7, 0.2);
    const double gbps = 2.0 * (double)c.bytes / mc / 1e9; /* read and written */
    printf("\nOps (one thread; kernels %s): µs per call, MB moved, and the memcpy floor:\n"
           "those bytes at memcpy's rate, %.1f GB/s (a 4 MiB copy, read + write)\n",
           qkv_kernels_name(), gbps);
    printf("%-24s %-14s %10s %10s %10s %8s\n", "op", "shape", "µs", "MB", "floor µs", "×floor");
    record("ops", "memcpy_gbps", gbps, "GB/s");
    qkv_rng g;
    qkv_rng_seed(&g, 8);
    c.x = qkv_tensor_new(1, (const int[]){N}, 0, NULL);
    for (size_t i = 0; i < c.x->numel; i++)
        c.x->data[i] = (qkv_real)qkv_rng_normalvariate(&g, 0, 2);
    qkv_tape_set_grad(c.t, 0);
    for (int i = 0; i < 4; i++) {
        c.map = maps[i];
        op_row(names[i], "[1048576]", median_time(run_map, &c, 7, 0.2) * 1e6, 8.0 * N / 1e6, gbps);
    }
    qkv_tensor_free(c.x);
    c.x = qkv_tensor_new(4, (const int[]){32, 4, 64, 64}, 0, NULL);
    for (size_t i = 0; i < c.x->numel; i++)
        c.x->data[i] = (qkv_real)qkv_rng_normalvariate(&g, 0, 2);
    c.map = softmax_map;
    op_row("softmax", "[32,4,64,64]", median_time(run_map, &c, 7, 0.2) * 1e6,
           8.0 * (double)c.x->numel / 1e6, gbps);
    qkv_tensor_free(c.x);
    /* layer norm forward + backward: x and y, then dy, x and dx, once each */
    qkv_tape_set_grad(c.t, 1);
    c.x = qkv_tensor_new(3, (const int[]){32, 64, 128}, 1, NULL);
    c.gamma = qkv_tensor_new(1, (const int[]){128}, 1, NULL);
    c.beta = qkv_tensor_new(1, (const int[]){128}, 1, NULL);
    qkv_real *dy = malloc(c.x->numel * sizeof *dy);
    for (size_t i = 0; i < c.x->numel; i++) {
        c.x->data[i] = (qkv_real)qkv_rng_normalvariate(&g, 0, 1);
        dy[i] = (qkv_real)qkv_rng_normalvariate(&g, 0, 1);
    }
    for (int j = 0; j < 128; j++)
        c.gamma->data[j] = 1;
    c.dy = dy;
    op_row("layer_norm fwd+bwd", "[32,64,128]", median_time(run_layer_norm, &c, 7, 0.2) * 1e6,
           5.0 * 4 * (double)c.x->numel / 1e6, gbps);
    free(dy);
    qkv_tensor_free(c.x);
    qkv_tensor_free(c.gamma);
    qkv_tensor_free(c.beta);
    qkv_tape_free(c.t);
    free(c.src);
    free(c.dst);
}

/* ------------------------------------------------------------------------ */
/* attention at length T: the op that keeps S and A, and the online form     */

/* What the two forms' runs share: the tape, and which form runs. */
typedef struct long_form {
    qkv_tape *t;
    int online;
} long_form;

/* fn on a fresh tape, the kept form (online 0) and then the online one:
 * median ms per call and the tape's high-water mark in MB, in ms[form]
 * and mb[form]. */
static void time_forms(void (*fn)(void *), void *ctx, long_form *f, double ms[2], double mb[2])
{
    for (f->online = 0; f->online < 2; f->online++) {
        f->t = qkv_tape_new(0, NULL);
        ms[f->online] = median_time(fn, ctx, 3, 0.2) * 1e3;
        mb[f->online] = qkv_tape_high_water(f->t) / 1048576.0;
        qkv_tape_free(f->t);
    }
}

typedef struct long_ctx {
    long_form f;
    qkv_tensor *q, *k, *v, *mask;
    const qkv_real *dy;
} long_ctx;

static void run_long(void *p)
{
    long_ctx *c = p;
    qkv_tape *t = c->f.t;
    qkv_tape_reset(t);
    qkv_tensor *o = c->f.online ? qkv_attention_online(t, c->q, c->k, c->v, NULL, 0.125, 1)
                                : qkv_attention(t, c->q, c->k, c->v, c->mask, 0.125, NULL);
    if (qkv_backward_from(t, o, c->dy, o->numel) != QKV_OK) {
        fprintf(stderr, "bench: long attention failed: %s\n", qkv_tape_error(t));
        exit(1);
    }
}

typedef struct long_block_ctx {
    long_form f;
    qkv_params *p;
    qkv_block blk;
    qkv_tensor *x;
} long_block_ctx;

/* The block's forward and backward; asking for the weights keeps the
 * layer on the form that makes them. */
static void run_long_block(void *p)
{
    long_block_ctx *c = p;
    qkv_tape *t = c->f.t;
    qkv_params_zero_grad(c->p);
    qkv_tape_reset(t);
    qkv_mha_parts parts;
    qkv_tensor *y = qkv_block_forward(t, &c->blk, c->x, NULL, c->f.online ? NULL : &parts);
    if (qkv_backward(t, qkv_mean(t, y)) != QKV_OK) {
        fprintf(stderr, "bench: long block failed: %s\n", qkv_tape_error(t));
        exit(1);
    }
}

/* The Transformer block (d_model 128, 4 heads, FFN 512, causal) at B 4,
 * T 1024: with its weights asked for, and without (the online form). */
static void bench_long_block(void)
{
    long_block_ctx c = {0};
    c.p = qkv_params_new(5, NULL);
    if (c.p == NULL ||
        qkv_block_init(&c.blk, c.p, "block", BLK_D, BLK_H, BLK_F, 1, NULL) != QKV_OK) {
        fprintf(stderr, "bench: cannot build the block\n");
        exit(1);
    }
    c.x = qkv_tensor_new(3, (const int[]){4, 1024, BLK_D}, 0, NULL);
    qkv_rng g;
    qkv_rng_seed(&g, 4);
    for (size_t i = 0; i < c.x->numel; i++)
        c.x->data[i] = (qkv_real)qkv_rng_normalvariate(&g, 0, 1);
    double ms[2], mb[2];
    time_forms(run_long_block, &c, &c.f, ms, mb);
    printf("%5d %5d %14.2f %14.2f %12.1f %12.1f   (Transformer block, forward + backward)\n", 4,
           1024, ms[0], ms[1], mb[0], mb[1]);
    record("long", "block_T1024", ms[0] * 1e3, "us");
    record("long", "block_online_T1024", ms[1] * 1e3, "us");
    record("long", "block_tape_T1024", mb[0], "MB");
    record("long", "block_online_tape_T1024", mb[1], "MB");
    qkv_tensor_free(c.x);
    qkv_params_free(c.p);
}

/* Causal self-attention, d 64, forward and backward from a fixed dO, at
 * T = 256, 1024, 2048 and 4096 (B 32, 4, 1, 1: S is 8, 16, 16 and 64
 * MiB): time and the tape's high-water mark, which holds S, A and their
 * gradients in the first. */
static void bench_long(void)
{
    static const int Bs[4] = {32, 4, 1, 1}, Ts[4] = {256, 1024, 2048, 4096};
    printf("\nCausal attention at length T (d 64; forward + backward; one thread; %s kernels)\n",
           qkv_kernels_name());
    printf("%5s %5s %14s %14s %12s %12s\n", "B", "T", "attention ms", "online ms", "tape MB",
           "online MB");
    for (int r = 0; r < 4; r++) {
        const int B = Bs[r], T = Ts[r], shape[3] = {B, T, 64};
        long_ctx c = {0};
        qkv_rng g;
        qkv_rng_seed(&g, 3);
        c.q = qkv_tensor_new(3, shape, 1, NULL);
        c.k = qkv_tensor_new(3, shape, 1, NULL);
        c.v = qkv_tensor_new(3, shape, 1, NULL);
        c.mask = qkv_tensor_new(2, (const int[]){T, T}, 0, NULL);
        qkv_real *dy = malloc(sizeof *dy * c.q->numel);
        if (c.q == NULL || c.k == NULL || c.v == NULL || c.mask == NULL || dy == NULL) {
            fprintf(stderr, "bench: out of memory\n");
            exit(1);
        }
        for (size_t i = 0; i < c.q->numel; i++) {
            c.q->data[i] = (qkv_real)qkv_rng_normalvariate(&g, 0, 1);
            c.k->data[i] = (qkv_real)qkv_rng_normalvariate(&g, 0, 1);
            c.v->data[i] = (qkv_real)qkv_rng_normalvariate(&g, 0, 1);
            dy[i] = (qkv_real)qkv_rng_normalvariate(&g, 0, 1);
        }
        for (int i = 0; i < T; i++)
            for (int j = 0; j < T; j++)
                c.mask->data[(size_t)i * T + j] = j > i ? -INFINITY : 0;
        c.dy = dy;
        double ms[2], mb[2];
        time_forms(run_long, &c, &c.f, ms, mb);
        printf("%5d %5d %14.2f %14.2f %12.1f %12.1f\n", B, T, ms[0], ms[1], mb[0], mb[1]);
        char key[48];
        snprintf(key, sizeof key, "attention_T%d", T);
        record("long", key, ms[0] * 1e3, "us");
        snprintf(key, sizeof key, "attention_online_T%d", T);
        record("long", key, ms[1] * 1e3, "us");
        snprintf(key, sizeof key, "attention_tape_T%d", T);
        record("long", key, mb[0], "MB");
        snprintf(key, sizeof key, "attention_online_tape_T%d", T);
        record("long", key, mb[1], "MB");
        free(dy);
        qkv_tensor_free(c.q);
        qkv_tensor_free(c.k);
        qkv_tensor_free(c.v);
        qkv_tensor_free(c.mask);
    }
    bench_long_block();
}

static double measure_rss(const char *qkv)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (freopen("/dev/null", "w", stdout) == NULL)
            _exit(127);
        execl(qkv, qkv, "train", "--quiet", "--log", "/tmp/qkv_bench_train.csv", "--save",
              "/tmp/qkv_bench_model.safetensors", (char *)NULL);
        _exit(127);
    }
    int status;
    struct rusage ru;
    if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
        getrusage(RUSAGE_CHILDREN, &ru) != 0)
        return -1;
    return ru.ru_maxrss / 1024.0;
}

static void report_rss(const char *qkv, double mb)
{
    if (mb < 0) {
        printf("\npeak RSS: could not run %s train\n", qkv);
        return;
    }
    printf("\nPeak RSS of the default `qkv train`: %.1f MB\n", mb);
    record("train", "peak_rss_default_train", mb, "MB");
}

/* The R step's batches go beside the CSV, for bench_torch.py. */
static void batches_beside(const char *csv_path)
{
    const char *slash = strrchr(csv_path, '/');
    snprintf(real_batches_path, sizeof real_batches_path, "%.*sbench_batches.csv",
             slash != NULL ? (int)(slash - csv_path + 1) : 0, csv_path);
}

/* The commands that run one table; steps takes an argument (its row). */
typedef struct table {
    const char *name;
    void (*run)(const char *arg);
} table;

static void steps_table(const char *arg)
{
    bench_steps(arg);
}

static void ops_table(const char *arg)
{
    (void)arg;
    bench_ops();
}

static void threads_table(const char *arg)
{
    (void)arg;
    bench_threads();
}

static void rnn_table(const char *arg)
{
    (void)arg;
    bench_rnn();
}

static void long_table(const char *arg)
{
    (void)arg;
    bench_long();
}

static void block_table(const char *arg)
{
    (void)arg;
    bench_block();
}

static const table tables[] = {{"steps", steps_table},     {"ops", ops_table},
                               {"threads", threads_table}, {"rnn", rnn_table},
                               {"long", long_table},       {"block", block_table}};

/* Nonzero when arg suits table tb: steps takes one of its rows (R, S, M,
 * L), the length sweep (T) or one length of it (T16 .. T256); the others
 * take nothing. */
static int table_arg_ok(const table *tb, const char *arg)
{
    static const char *const rows[] = {"R",   "S",   "M",   "L",    "T",
                                       "T16", "T32", "T64", "T128", "T256"};
    for (size_t i = 0; tb->run == steps_table && i < sizeof rows / sizeof rows[0]; i++)
        if (strcmp(arg, rows[i]) == 0)
            return 1;
    return 0;
}

static const table *one_table(const char *name)
{
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
        if (strcmp(name, tables[i].name) == 0)
            return &tables[i];
    return NULL;
}

static const char usage[] =
    "usage: bench [QKV_BINARY [CSV]]   every table; QKV_BINARY (default build/qkv) is\n"
    "                                  run for peak RSS, CSV defaults to out/bench.csv\n"
    "       bench steps [R|S|M|L|T|TN] the training steps (all, or one; T the length\n"
    "                                  sweep, TN its step at N = 16, 32, 64, 128, 256)\n"
    "       bench gemm [CSV|-] [SET]   GEMM against OpenBLAS (SET: portable, avx2, avx512)\n"
    "       bench ops | threads | rnn | long | block   one table alone\n"
    "       bench --csv FILE steps|ops|threads|rnn|long|block ...   one table, its rows\n"
    "                                  written to FILE (scripts/bench_pairs.sh)\n"
    "QKV_KERNELS picks the kernel set; OPENBLAS_CORETYPE OpenBLAS's kernel;\n"
    "QKV_BENCH_ALLROWS=1 makes the R step compute every row's scores and weights\n"
    "(qkv train's steps compute the pronoun's row only).\n";

int main(int argc, char **argv)
{
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(usage, stdout);
        return 0;
    }
    /* a one-table command, its rows also to FILE after --csv FILE */
    const char *csv_path = NULL;
    if (argc > 1 && strcmp(argv[1], "--csv") == 0) {
        if (argc < 4 || one_table(argv[3]) == NULL) {
            fprintf(stderr,
                    "bench: --csv takes a file, then one of steps, ops, threads, rnn, long, "
                    "block\n%s",
                    usage);
            return 2;
        }
        csv_path = argv[2];
        argc -= 2;
        argv += 2;
    }
    if (argc > 1 && argv[1][0] == '-') {
        fprintf(stderr, "bench: unknown option %s\n%s", argv[1], usage);
        return 2;
    }
    const table *tb = argc > 1 ? one_table(argv[1]) : NULL;
    if (tb != NULL && argc > 2 && !table_arg_ok(tb, argv[2])) {
        fprintf(stderr, "bench: %s takes %s, not '%s'\n%s", tb->name,
                tb->run == steps_table ? "one of R, S, M, L, T, T16, T32, T64, T128, T256"
                                       : "no argument",
                argv[2], usage);
        return 2;
    }
    if (tb != NULL) { /* `bench steps [R|S|M|L|T<len>]`, `bench ops`, ...: that table alone */
        if (csv_path != NULL) {
            if ((csv = fopen(csv_path, "w")) == NULL) {
                fprintf(stderr, "bench: cannot write %s: %s\n", csv_path, strerror(errno));
                return 1;
            }
            fprintf(csv, "section,name,value,unit\n");
            batches_beside(csv_path);
        }
        tb->run(argc > 2 ? argv[2] : NULL);
        return csv != NULL && fclose(csv) != 0 ? 1 : 0;
    }
    if (argc > 1 && strcmp(argv[1], "gemm") == 0) { /* `bench gemm [CSV|-] [SET]`: that table */
        if (argc > 2 && strcmp(argv[2], "-") != 0 && (csv = fopen(argv[2], "w")) != NULL)
            fprintf(csv, "section,name,value,unit\n");
        bench_gemm(argc > 3 ? argv[3] : NULL);
        if (csv != NULL)
            fclose(csv);
        return 0;
    }
    const char *qkv = argc > 1 ? argv[1] : "build/qkv";
    struct stat sb; /* a mistyped table name would be run as the binary */
    if (argc > 1 && (stat(qkv, &sb) != 0 || !S_ISREG(sb.st_mode) || access(qkv, X_OK) != 0)) {
        fprintf(stderr,
                "bench: '%s' is neither a table (steps, gemm, ops, threads, rnn, long, block) nor "
                "an executable qkv\n%s",
                qkv, usage);
        return 2;
    }
    const char *out = argc > 2 ? argv[2] : "out/bench.csv";
    const double rss = measure_rss(qkv); /* first: see measure_rss */
    qkv_error err = qkv_error_none();
    if (qkv_mkdirs_for(out, &err) == QKV_OK && (csv = fopen(out, "w")) != NULL)
        fprintf(csv, "section,name,value,unit\n");
    else
        fprintf(stderr, "bench: cannot write %s (continuing without CSV)\n", out);
    batches_beside(out);
    bench_matmul();
    bench_steps(NULL);
    bench_threads();
    bench_ops();
    bench_block();
    bench_rnn();
    bench_long();
    report_rss(qkv, rss);
    if (csv != NULL && fclose(csv) == 0)
        printf("\nwrote %s\n", out);
    return 0;
}
