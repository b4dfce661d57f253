/*
 * fuzz_safetensors.c - libFuzzer target: the safetensors reader on
 * arbitrary bytes, then every accessor on what it accepts, a read of each
 * tensor that must either give finite values or write nothing, and a load
 * into a small parameter list (w [2,3], b [3]) that must either take every
 * value or change nothing.
 */
#include <math.h>
#include <stdlib.h>

#include "qkv.h"
#include "st_mutate.h"

static qkv_params *list(void)
{
    static qkv_params *p;
    if (p == NULL) {
        p = qkv_params_new(0, NULL);
        const qkv_init z = {QKV_INIT_ZEROS, 0, 0};
        qkv_params_add(p, "w", 2, (const int[]){2, 3}, z, NULL);
        qkv_params_add(p, "b", 1, (const int[]){3}, z, NULL);
    }
    return p;
}

/* Reads tensor i of f: every value finite, or an error that wrote
 * nothing; a count one more than its own is refused. */
static void read_tensor(const qkv_st *f, int i)
{
    const size_t n = qkv_st_numel(f, i);
    qkv_real *v = malloc((n + 1) * sizeof *v); /* n is at most the input's size */
    if (v == NULL)
        return;
    for (size_t k = 0; k <= n; k++)
        v[k] = -7;
    qkv_error err = qkv_error_none();
    if (qkv_st_read(f, i, v, n + 1, &err) != QKV_ERR_ARG || v[0] != -7)
        abort();
    err = qkv_error_none();
    if (qkv_st_read(f, i, v, n, &err) == QKV_OK) {
        for (size_t k = 0; k < n; k++)
            if (!isfinite(v[k]))
                abort();
    } else {
        if (err.status == QKV_OK)
            abort();
        for (size_t k = 0; k < n; k++)
            if (v[k] != -7)
                abort(); /* a failed read wrote */
    }
    if (v[n] != -7)
        abort(); /* past the end */
    free(v);
}

/* qkv_st_dims agrees with qkv_st_shape and qkv_st_numel: every dimension
 * (no more than cap written), their product the count, and the same
 * dimensions as qkv_st_shape wherever that gives them. */
static void check_dims(const qkv_st *f, int i, int shape[QKV_MAX_DIMS])
{
    uint64_t d[QKV_ST_MAX_DIMS + 1];
    d[QKV_ST_MAX_DIMS] = 7;
    const int nd = qkv_st_dims(f, i, d, QKV_ST_MAX_DIMS);
    if (nd < 0 || nd > QKV_ST_MAX_DIMS || d[QKV_ST_MAX_DIMS] != 7 ||
        qkv_st_dims(f, i, NULL, 0) != nd)
        abort();
    uint64_t n = 1;
    for (int k = 0; k < nd; k++)
        n *= d[k]; /* the reader refused a product that overflows */
    if (n != qkv_st_numel(f, i))
        abort();
    const int sd = qkv_st_shape(f, i, shape);
    if (sd >= 0 && sd != nd)
        abort();
    for (int k = 0; k < sd; k++)
        if ((uint64_t)shape[k] != d[k])
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    qkv_error err = qkv_error_none();
    qkv_st *f = qkv_st_parse(data, size, "fuzz", &err);
    if (f == NULL) {
        if (err.status == QKV_OK)
            abort();
        return 0;
    }
    int shape[QKV_MAX_DIMS];
    for (int i = 0; i < qkv_st_count(f); i++) {
        if (qkv_st_name(f, i) == NULL || qkv_st_dtype(f, i) == NULL)
            abort();
        if (qkv_st_find(f, qkv_st_name(f, i)) != i) /* names are unique */
            abort();
        check_dims(f, i, shape);
        read_tensor(f, i);
    }
    for (int i = 0; i < qkv_st_meta_count(f); i++)
        if (qkv_st_meta_key(f, i) == NULL || qkv_st_meta(f, qkv_st_meta_key(f, i)) == NULL)
            abort();
    if (qkv_st_meta_key(f, qkv_st_meta_count(f)) != NULL)
        abort();
    (void)qkv_st_meta(f, "qkv_format");
    qkv_params *p = list();
    qkv_tensor *w = qkv_params_get(p, "w");
    for (size_t i = 0; i < w->numel; i++)
        w->data[i] = -7;
    if (qkv_st_load(f, p, &err) != QKV_OK) {
        for (size_t i = 0; i < w->numel; i++)
            if (w->data[i] != -7)
                abort(); /* a failed load changed the model */
    } else {
        for (size_t i = 0; i < w->numel; i++)
            if (!isfinite(w->data[i]))
                abort();
    }
    qkv_st_close(f);
    return 0;
}
