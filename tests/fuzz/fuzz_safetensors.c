/*
 * fuzz_safetensors.c - libFuzzer target: the safetensors reader on
 * arbitrary bytes, then every accessor on what it accepts, a read of each
 * tensor that must either give finite values or write nothing, and a load
 * into a small parameter list (w [2,3], b [3]) that must either take every
 * value or change nothing. Then the same bytes as an optimizer's state
 * file (when the reader takes them: the loader reads with it), loaded into
 * SGD (momentum 0.9) and Adam (the defaults) over that list: either whole
 * (every moment finite, Adam's second moments, steps, rate and norm not
 * negative) or refused with a message and the optimizer as it was.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* ------------------------------------------------------------------------ */
/* the optimizer's state                                                    */

/* The two optimizers over list()'s parameters, made once. */
static qkv_optim *optim(int adam)
{
    static qkv_optim *o[2];
    if (o[adam] == NULL) {
        qkv_optim_config c = qkv_optim_defaults(adam ? QKV_ADAM : QKV_SGD);
        c.momentum = adam ? 0 : 0.9;
        o[adam] = qkv_params_optim(list(), &c, NULL);
        if (o[adam] == NULL)
            abort();
    }
    return o[adam];
}

/* The file qkv_optim_load reads (it takes a path): made once, removed at
 * exit. */
static char state_path[64];
static int state_fd = -1;

static void remove_state_file(void)
{
    unlink(state_path);
}

/* Writes the input to the state file; its path. */
static const char *state_file(const uint8_t *data, size_t size)
{
    if (state_fd < 0) {
        const char *dir = getenv("TMPDIR"); /* else memory, where there is a /dev/shm */
        if (dir == NULL || strlen(dir) >= 40)
            dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(state_path, sizeof state_path, "%s/fuzz_optim_XXXXXX", dir);
        if ((state_fd = mkstemp(state_path)) < 0)
            abort();
        atexit(remove_state_file);
    }
    if (ftruncate(state_fd, 0) != 0 || (size && pwrite(state_fd, data, size, 0) != (ssize_t)size))
        abort();
    return state_path;
}

enum { N_STATE = 2 * (6 + 3) }; /* m and v of w and b */

/* What a refused load keeps: steps, rate, norm and every moment. */
typedef struct optim_copy {
    long steps;
    double lr, norm;
    double state[N_STATE];
    int n;
} optim_copy;

static optim_copy copy_of(const qkv_optim *o)
{
    optim_copy c = {qkv_optim_steps(o), qkv_optim_lr(o), qkv_optim_last_norm(o), {0}, 0};
    for (int i = 0; i < 2; i++)
        for (int w = 0; w < 2; w++) {
            size_t n = 0;
            const double *m = qkv_optim_state(o, i, w, &n);
            for (size_t k = 0; m != NULL && k < n; k++)
                c.state[c.n++] = m[k];
        }
    return c;
}

/* Loads path, bytes the reader takes, into o. */
static void load_state(qkv_optim *o, const char *path)
{
    const optim_copy before = copy_of(o);
    qkv_error err = qkv_error_none();
    const qkv_status s = qkv_optim_load(o, path, &err);
    const optim_copy after = copy_of(o);
    if (s != QKV_OK) {
        if (err.status != s || err.message[0] == '\0')
            abort();
        if (after.steps != before.steps || after.lr != before.lr || after.norm != before.norm ||
            after.n != before.n ||
            memcmp(after.state, before.state, sizeof *after.state * (size_t)after.n) != 0)
            abort(); /* a refused load changed the optimizer */
        return;
    }
    if (after.n != before.n || after.steps < 0 || !isfinite(after.lr) || after.lr < 0 ||
        !isfinite(after.norm) || after.norm < 0)
        abort();
    for (int k = 0; k < after.n; k++)
        if (!isfinite(after.state[k]))
            abort();
    for (int i = 0; i < 2; i++) { /* Adam's second moments: never negative */
        size_t n = 0;
        const double *v = qkv_optim_state(o, i, 1, &n);
        for (size_t k = 0; v != NULL && k < n; k++)
            if (v[k] < 0)
                abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    qkv_error err = qkv_error_none();
    qkv_st *f = qkv_st_parse(data, size, "fuzz", &err);
    if (f == NULL) {
        if (err.status == QKV_OK)
            abort();
        return 0; /* qkv_optim_load reads with qkv_st_open: it refuses these the same */
    }
    const char *path = state_file(data, size);
    for (int adam = 0; adam < 2; adam++)
        load_state(optim(adam), path);
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
