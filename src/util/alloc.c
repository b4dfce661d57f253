/*
 * alloc.c - the library's allocation functions, counted, with a test hook
 * that makes one chosen allocation fail; and overflow-checked size
 * arithmetic.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/util.h"

/* atomic: the saves of two threads may allocate at once */
static atomic_size_t alloc_count;
static atomic_size_t alloc_largest; /* the largest request since the last reset */
static size_t fail_at;              /* the allocation (by count) that fails; 0: none */
static int fail_env = 1;            /* QKV_TEST_ALLOC_FAIL still to be read */

size_t qkv_alloc_count(void)
{
    return atomic_load_explicit(&alloc_count, memory_order_relaxed);
}

size_t qkv_alloc_largest(int reset)
{
    return reset ? atomic_exchange_explicit(&alloc_largest, 0, memory_order_relaxed)
                 : atomic_load_explicit(&alloc_largest, memory_order_relaxed);
}

void qkv_alloc_fail_at(size_t n)
{
    fail_env = 0;
    fail_at = n;
}

/* Under QKV_TEST_ALLOC_FAIL, at exit: how many allocations the program
 * made, so a test knows how far to walk. */
static void report_count(void)
{
    fprintf(stderr, "qkv-test: %zu allocations\n", qkv_alloc_count());
}

/* Counts one allocation; nonzero when it is the one that must fail. */
static int counted(size_t bytes)
{
    size_t seen = atomic_load_explicit(&alloc_largest, memory_order_relaxed);
    while (bytes > seen &&
           !atomic_compare_exchange_weak_explicit(&alloc_largest, &seen, bytes,
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
    if (fail_env) { /* a whole program under test: QKV_TEST_ALLOC_FAIL=N */
        const char *e = getenv("QKV_TEST_ALLOC_FAIL");
        /* with QKV_TEST_ALLOC_FAIL_TASK, N counts within one task of the
         * qkv program's sweeps, which arms it (src/cli/tasks.c) */
        fail_at = e != NULL && getenv("QKV_TEST_ALLOC_FAIL_TASK") == NULL
                      ? (size_t)strtoull(e, NULL, 10)
                      : 0;
        fail_env = 0;
        if (e != NULL)
            atexit(report_count);
    }
    size_t n = atomic_fetch_add_explicit(&alloc_count, 1, memory_order_relaxed) + 1;
    if (n != fail_at || fail_at == 0)
        return 0;
    errno = ENOMEM;
    return 1;
}

void *qkv_malloc(size_t n)
{
    return counted(n) ? NULL : malloc(n);
}

void *qkv_calloc(size_t n, size_t size)
{
    return counted(size != 0 && n > SIZE_MAX / size ? SIZE_MAX : n * size) ? NULL : calloc(n, size);
}

void *qkv_realloc(void *p, size_t n)
{
    return counted(n) ? NULL : realloc(p, n);
}

void *qkv_aligned_alloc(size_t align, size_t n)
{
    return counted(n) ? NULL : aligned_alloc(align, n);
}

int qkv_mul_size(size_t a, size_t b, size_t *r)
{
    if (a != 0 && b > SIZE_MAX / a)
        return 0;
    *r = a * b;
    return 1;
}

int qkv_add_size(size_t a, size_t b, size_t *r)
{
    if (b > SIZE_MAX - a)
        return 0;
    *r = a + b;
    return 1;
}
