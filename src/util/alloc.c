/*
 * alloc.c - the library's allocation functions, counted, and
 * overflow-checked size arithmetic.
 */
#include <stdint.h>
#include <stdlib.h>

#include "util/util.h"

static size_t alloc_count;

size_t qkv_alloc_count(void)
{
    return alloc_count;
}

void *qkv_malloc(size_t n)
{
    alloc_count++;
    return malloc(n);
}

void *qkv_calloc(size_t n, size_t size)
{
    alloc_count++;
    return calloc(n, size);
}

void *qkv_realloc(void *p, size_t n)
{
    alloc_count++;
    return realloc(p, n);
}

void *qkv_aligned_alloc(size_t align, size_t n)
{
    alloc_count++;
    return aligned_alloc(align, n);
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
