/*
 * test_threads.c - the thread pool (threads.c): which parts a job is cut
 * into, that every index runs exactly once in the part that owns it, over
 * many jobs in a row, that a call from inside a job runs on its caller,
 * and that the workers run in their caller's floating-point mode.
 * (That results do not depend on the thread count is tested where the work
 * is: test_attention.c, test_nn.c, test_cli.c.)
 */
#include <stdlib.h>
#include <string.h>

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
    suite_add_tcase(s, tc);
    return s;
}
