/*
 * test_threads.c - the thread pool (threads.c): which parts a job is cut
 * into, that every index runs exactly once in the part that owns it, over
 * many jobs in a row, that a call from inside a job runs on its caller,
 * that the workers run in their caller's floating-point mode, that
 * threads of a program's own train models of their own at once, and that
 * a child forked after the workers started runs jobs on workers of its
 * own.
 * (That results do not depend on the thread count is tested where the work
 * is: test_attention.c, test_nn.c, test_cli.c.)
 */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests.h"

/* Enough work for any number of parts. */
#define LOTS ((size_t)64 * QKV_PARALLEL_MIN_WORK)

typedef struct record {
    int *part;  /* (n) the part that ran index i */
    int *count; /* (n) how many times index i ran */
} record;

static void mark(void *ctx, int part, size_t i0, size_t i1)
{
    record *r = ctx;
    for (size_t i = i0; i < i1; i++) {
        r->part[i] = part;
        r->count[i]++;
    }
}

START_TEST(test_parts_follow_threads_work_and_size)
{
    ck_assert_int_eq(qkv_threads_use(4, NULL), 0);
    ck_assert_int_eq(qkv_threads(), 4);
    ck_assert_int_eq(qkv_parallel_parts(100, LOTS, 64), 4);
    ck_assert_int_eq(qkv_parallel_parts(100, LOTS, 3), 3);                       /* max_parts */
    ck_assert_int_eq(qkv_parallel_parts(2, LOTS, 64), 2);                        /* n */
    ck_assert_int_eq(qkv_parallel_parts(100, 2 * QKV_PARALLEL_MIN_WORK, 64), 2); /* work */
    ck_assert_int_eq(qkv_parallel_parts(100, QKV_PARALLEL_MIN_WORK - 1, 64), 1);
    ck_assert_int_eq(qkv_parallel_parts(0, LOTS, 64), 1);
    ck_assert_int_eq(qkv_threads_use(0, NULL), QKV_ERR_ARG);
    ck_assert_int_eq(qkv_threads_use(65, NULL), QKV_ERR_ARG);
    ck_assert_int_eq(qkv_threads(), 4); /* refused calls change nothing */
    qkv_threads_use(1, NULL);
    ck_assert_int_eq(qkv_parallel_parts(100, LOTS, 64), 1);
}
END_TEST

/* QKV_THREADS was read with strtol, which skips leading spaces and takes
 * a sign: " 2" and "+2" ran on 2 threads, where qkv refuses them. The
 * library now takes what qkv takes and falls back to 1 on the rest. */
START_TEST(test_qkv_threads_takes_digits_alone)
{
    static const struct {
        const char *value;
        int threads;
    } cases[] = {
        {"2", 2},
        {"64", 64},
        {"02", 2},
        {" 2", 1},
        {"2 ", 1},
        {"\t2", 1},
        {"2\n", 1},
        {"+2", 1},
        {"-2", 1},
        {"2x", 1},
        {"0x2", 1},
        {"0", 1},
        {"65", 1},
        {"", 1},
        {" ", 1},
        {"abc", 1},
        {"99999999999999999999", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(qkv_threads_from_env(cases[i].value) == cases[i].threads,
                      "QKV_THREADS='%s': %d threads, expected %d", cases[i].value,
                      qkv_threads_from_env(cases[i].value), cases[i].threads);
    ck_assert_int_eq(qkv_threads_from_env(NULL), 1);
}
END_TEST

/* Part p owns [n·p/parts, n·(p+1)/parts); every index runs once. */
START_TEST(test_every_index_runs_once_in_its_part)
{
    static const size_t sizes[] = {1, 2, 3, 7, 64, 1000};
    for (int threads = 1; threads <= 4; threads++) {
        qkv_threads_use(threads, NULL);
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            size_t n = sizes[s];
            record r = {calloc(n, sizeof(int)), calloc(n, sizeof(int))};
            qkv_parallel_for(n, LOTS, 64, mark, &r);
            int parts = qkv_parallel_parts(n, LOTS, 64);
            for (size_t i = 0; i < n; i++) {
                ck_assert_msg(r.count[i] == 1, "n=%zu threads=%d: index %zu ran %d times", n,
                              threads, i, r.count[i]);
                int p = r.part[i];
                ck_assert_msg(p >= 0 && p < parts && n * (size_t)p / (size_t)parts <= i &&
                                  i < n * (size_t)(p + 1) / (size_t)parts,
                              "n=%zu threads=%d: index %zu ran in part %d of %d", n, threads, i, p,
                              parts);
            }
            free(r.part);
            free(r.count);
        }
    }
    qkv_threads_use(1, NULL);
}
END_TEST

/* Thousands of jobs in a row: no hand-over may be lost or doubled. */
START_TEST(test_many_jobs_in_a_row)
{
    enum { N = 97, JOBS = 3000 };
    qkv_threads_use(3, NULL);
    int part[N], count[N] = {0};
    record r = {part, count};
    for (int j = 0; j < JOBS; j++)
        qkv_parallel_for(N, LOTS, 64, mark, &r);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(count[i], JOBS);
    qkv_threads_use(1, NULL);
}
END_TEST

/* A job that itself calls qkv_parallel_for: the inner call runs as one part
 * on the thread that made it. */
typedef struct nested {
    int inner_part[4];
    size_t inner_n[4];
} nested;

static void inner(void *ctx, int part, size_t i0, size_t i1)
{
    size_t *got = ctx;
    got[0] = (size_t)part;
    got[1] = i1 - i0;
}

static void outer(void *ctx, int part, size_t i0, size_t i1)
{
    nested *r = ctx;
    (void)i1;
    size_t got[2] = {99, 0};
    qkv_parallel_for(10, LOTS, 64, inner, got);
    r->inner_part[i0] = (int)got[0];
    r->inner_n[i0] = got[1];
    (void)part;
}

START_TEST(test_a_call_inside_a_job_runs_on_its_caller)
{
    qkv_threads_use(4, NULL);
    nested r = {{-1, -1, -1, -1}, {0}};
    qkv_parallel_for(4, LOTS, 64, outer, &r);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(r.inner_part[i], 0);
        ck_assert_uint_eq(r.inner_n[i], 10);
    }
    qkv_threads_use(1, NULL);
}
END_TEST

/* Each index i: the bits of a product whose exact value, 2^-140, is
 * subnormal in float (0x00000200), or 0 where it was flushed, and which
 * part ran it. Bits, because a thread that flushes reads a subnormal
 * input as 0 too: comparing the float there would hide the difference. */
typedef struct tiny_run {
    uint32_t out[64];
    int part[64];
} tiny_run;

static void tiny_products(void *ctx, int part, size_t i0, size_t i1)
{
    tiny_run *r = ctx;
    for (size_t i = i0; i < i1; i++) {
        volatile float a = 0x1p-70f, b = 0x1p-70f;
        const float p = a * b;
        memcpy(&r->out[i], &p, sizeof p);
        r->part[i] = part;
    }
}
#define TINY_BITS 0x00000200u

/* qkv_flush_denormals flushes on the caller and on every worker that runs
 * its jobs (a worker started before the call too), and 0 restores
 * subnormals everywhere: the same bits on any thread count. */
START_TEST(test_flush_denormals_reaches_the_workers)
{
    qkv_threads_use(4, NULL);
    tiny_run r;
    qkv_parallel_for(64, LOTS, 64, tiny_products, &r); /* workers started, IEEE mode */
    for (int i = 0; i < 64; i++)
        ck_assert_uint_eq(r.out[i], TINY_BITS);
    if (qkv_flush_denormals(1) == 0) { /* no such mode here: nothing changes */
        qkv_threads_use(1, NULL);
        return;
    }
    memset(&r, 0, sizeof r);
    qkv_parallel_for(64, LOTS, 64, tiny_products, &r);
    int workers = 0;
    for (int i = 0; i < 64; i++) {
        ck_assert_msg(r.out[i] == 0, "index %d on part %d: bits %08x", i, r.part[i], r.out[i]);
        workers += r.part[i] != 0;
    }
    ck_assert_int_gt(workers, 0);
    ck_assert_int_eq(qkv_flush_denormals(0), 1);
    qkv_parallel_for(64, LOTS, 64, tiny_products, &r);
    for (int i = 0; i < 64; i++)
        ck_assert_msg(r.out[i] == TINY_BITS, "index %d on part %d: bits %08x", i, r.part[i],
                      r.out[i]);
    qkv_threads_use(1, NULL);
}
END_TEST

/* A few steps of a one-block causal Transformer on seeded random tokens
 * (each model its own list, tape and optimizer): the last loss, and the
 * bits of its first weight's first value. */
typedef struct own_run {
    uint64_t seed;
    double loss;
    qkv_real w0;
    qkv_status status;
} own_run;

static void *train_own(void *arg)
{
    enum { V = 12, T = 16, D = 16, B = 8, STEPS = 6 };
    own_run *r = arg;
    qkv_params *p = qkv_params_new(r->seed, NULL);
    qkv_embedding e;
    qkv_block blk;
    qkv_linear head;
    qkv_optim_config oc = qkv_optim_defaults(QKV_ADAM);
    qkv_tape *t = qkv_tape_new(0, NULL);
    r->status = p == NULL || t == NULL ? QKV_ERR_NOMEM : QKV_OK;
    if (r->status == QKV_OK)
        r->status = qkv_embedding_init(&e, p, "e", V, D, NULL);
    if (r->status == QKV_OK)
        r->status = qkv_block_init(&blk, p, "b", D, 4, 2 * D, 1, NULL);
    if (r->status == QKV_OK)
        r->status = qkv_linear_init(&head, p, "h", D, V, 1, NULL);
    qkv_optim *o = r->status == QKV_OK ? qkv_params_optim(p, &oc, NULL) : NULL;
    qkv_rng g;
    qkv_rng_seed(&g, r->seed);
    int ids[B * T], targets[B * T];
    for (int s = 0; s < STEPS && o != NULL && r->status == QKV_OK; s++) {
        for (int i = 0; i < B * T; i++) {
            ids[i] = (int)qkv_rng_below(&g, V);
            targets[i] = i % T != 0 ? ids[i - 1] : QKV_IGNORE;
        }
        qkv_params_zero_grad(p);
        qkv_tape_reset(t);
        qkv_tensor *x = qkv_embedding_forward(t, &e, ids, 2, (const int[]){B, T});
        x = qkv_linear_forward(t, &head, qkv_block_forward(t, &blk, x, NULL, NULL));
        qkv_tensor *loss = qkv_cross_entropy(t, x, targets);
        r->status = qkv_backward(t, loss);
        if (r->status == QKV_OK)
            r->status = qkv_optim_step(o);
        r->loss = r->status == QKV_OK ? loss->data[0] : 0;
    }
    if (o == NULL && r->status == QKV_OK)
        r->status = QKV_ERR_NOMEM;
    r->w0 = r->status == QKV_OK ? blk.attn.qkv.weight->data[0] : 0;
    qkv_optim_free(o);
    qkv_tape_free(t);
    qkv_params_free(p);
    return NULL;
}

/* ThreadSanitizer refuses to start threads in a child forked from a
 * process that has some (its die_after_fork), so the fork test is
 * skipped in that build; the others run the same code. */
#if defined(__SANITIZE_THREAD__)
#define QKV_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define QKV_TEST_TSAN 1
#endif
#endif

/* Runs `jobs` jobs of 97 indices on the pool and checks that every index
 * ran `jobs` times and that the workers ran some (part 2 of 3); returns 0
 * if so, else 1 (no ck_assert: it may run in a forked child). */
static int jobs_on_three_threads(int jobs)
{
    enum { N = 97 };
    int part[N], count[N] = {0};
    record r = {part, count};
    for (int j = 0; j < jobs; j++)
        qkv_parallel_for(N, LOTS, 64, mark, &r);
    for (int i = 0; i < N; i++)
        if (count[i] != jobs)
            return 1;
    return part[N - 1] == 2 ? 0 : 1;
}

/* fork() copies only the calling thread. A child forked after the pool's
 * workers started must not wait for the parent's workers, which do not
 * exist in it (it spun for ever), nor run a stale job: it starts workers
 * of its own. The parent's pool goes on as before. */
START_TEST(test_a_forked_child_starts_workers_of_its_own)
{
#ifdef QKV_TEST_TSAN
    return;
#endif
    qkv_threads_use(3, NULL);
    ck_assert_int_eq(qkv_parallel_parts(97, LOTS, 64), 3);
    ck_assert_int_eq(jobs_on_three_threads(20), 0); /* the parent's workers start */
    fflush(NULL);
    const pid_t pid = fork();
    ck_assert_msg(pid >= 0, "fork failed");
    if (pid == 0) {
        alarm(20); /* a hang fails the test, before the suite's timeout */
        exit(jobs_on_three_threads(50));
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child %s %d",
                  WIFSIGNALED(st) ? "died of signal" : "exited with",
                  WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    ck_assert_int_eq(jobs_on_three_threads(20), 0);
    qkv_threads_use(1, NULL);
}
END_TEST

/* runtime.h: threads of one's own may train models of their own at once
 * (the pool runs one caller's batched work, the others on their own
 * threads), with the bits of the same runs one after the other. */
START_TEST(test_threads_of_ones_own_train_their_own_models_at_once)
{
    enum { RUNS = 3 };
    qkv_threads_use(2, NULL);
    own_run alone[RUNS], together[RUNS];
    pthread_t th[RUNS];
    for (int i = 0; i < RUNS; i++) {
        alone[i] = (own_run){.seed = (uint64_t)i + 1};
        together[i] = alone[i];
        train_own(&alone[i]);
        ck_assert_int_eq(alone[i].status, QKV_OK);
    }
    for (int i = 0; i < RUNS; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, train_own, &together[i]), 0);
    for (int i = 0; i < RUNS; i++)
        ck_assert_int_eq(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < RUNS; i++) {
        ck_assert_int_eq(together[i].status, QKV_OK);
        ck_assert_msg(together[i].loss == alone[i].loss && together[i].w0 == alone[i].w0,
                      "run %d: loss %.17g and %.17g, weight %.9g and %.9g", i, together[i].loss,
                      alone[i].loss, (double)together[i].w0, (double)alone[i].w0);
    }
    ck_assert(alone[0].loss != alone[1].loss); /* the seeds make different runs */
    qkv_threads_use(1, NULL);
}
END_TEST

Suite *threads_suite(void)
{
    Suite *s = suite_create("threads");
    TCase *tc = tcase_create("pool");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_parts_follow_threads_work_and_size);
    tcase_add_test(tc, test_qkv_threads_takes_digits_alone);
    tcase_add_test(tc, test_every_index_runs_once_in_its_part);
    tcase_add_test(tc, test_many_jobs_in_a_row);
    tcase_add_test(tc, test_a_call_inside_a_job_runs_on_its_caller);
    tcase_add_test(tc, test_flush_denormals_reaches_the_workers);
    tcase_add_test(tc, test_threads_of_ones_own_train_their_own_models_at_once);
    tcase_add_test(tc, test_a_forked_child_starts_workers_of_its_own);
    suite_add_tcase(s, tc);
    return s;
}
