/*
 * inspect.c - `qkv inspect FILE`: what a safetensors file holds, without a
 * model: its metadata, and for each tensor its dtype, shape, number of
 * values and their minimum, maximum, mean and root mean square; or, with
 * --values NAME, one tensor's values.
 */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "util/util.h"

/* A tensor's summary: its values' minimum, maximum, mean and RMS. */
typedef struct stats {
    double min, max, mean, rms;
} stats;

/* s escaped for the terminal (qkv_escape), in a new string; NULL when
 * there is no memory for it. */
static char *escaped(const char *s)
{
    const size_t n = strlen(s);
    char *buf = n < SIZE_MAX / 4 ? malloc(4 * n + 1) : NULL;
    if (buf != NULL)
        qkv_escape(buf, 4 * n + 1, s);
    return buf;
}

/* The summary of v[0..n), n > 0, in double. The sums are scaled by the
 * largest magnitude when they overflow (a double build's values near
 * DBL_MAX), so that the mean and RMS of finite values are finite. */
static stats summarize(const qkv_real *v, size_t n)
{
    stats s = {(double)v[0], (double)v[0], 0, 0};
    double sum = 0, squares = 0, big = 0;
    for (size_t k = 0; k < n; k++) {
        const double x = (double)v[k];
        s.min = x < s.min ? x : s.min;
        s.max = x > s.max ? x : s.max;
        big = fabs(x) > big ? fabs(x) : big;
        sum += x;
        squares += x * x;
    }
    if (!isfinite(sum) || !isfinite(squares)) {
        sum = squares = 0;
        for (size_t k = 0; k < n; k++) {
            const double x = (double)v[k] / big;
            sum += x;
            squares += x * x;
        }
        s.mean = big * (sum / (double)n);
        s.rms = big * sqrt(squares / (double)n);
    } else {
        s.mean = sum / (double)n;
        s.rms = sqrt(squares / (double)n);
    }
    s.mean += 0.0; /* -0 as 0 */
    return s;
}

/* Tensor i's values, read as the loader reads them, in *out (a new array
 * of at least one value, which the caller frees) and their number in *n.
 * QKV_OK, or the status with the reason in err. */
static qkv_status read_values(const qkv_st *f, const char *path, int i, qkv_real **out, size_t *n,
                              qkv_error *err)
{
    *n = qkv_st_numel(f, i);
    *out = *n < SIZE_MAX / sizeof **out ? malloc((*n > 0 ? *n : 1) * sizeof **out) : NULL;
    if (*out == NULL)
        return qkv_error_set(err, QKV_ERR_NOMEM, "%s: out of memory for tensor '%s' (%zu values)",
                             path, qkv_st_name(f, i), *n);
    qkv_status s = qkv_st_read(f, i, *out, *n, err);
    if (s != QKV_OK) {
        free(*out);
        *out = NULL;
    }
    return s;
}

/* The failure for --values NAME when f has no such tensor: the names it
 * has, as many as fit a line. */
static int no_such_tensor(const qkv_st *f, const char *path, const char *name)
{
    char list[640] = "";
    size_t used = 0;
    const int n = qkv_st_count(f);
    for (int i = 0; i < n; i++) {
        const char *t = qkv_st_name(f, i);
        if (used + strlen(t) + 2 > 400) {
            snprintf(list + used, sizeof list - used, ", ... (%d in all)", n);
            break;
        }
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", t);
    }
    if (n == 0)
        return cli_fail("inspect: %s has no tensor '%s'; it has no tensors", path, name);
    return cli_fail("inspect: %s has no tensor '%s'; its tensors are %s", path, name, list);
}

/* Prints tensor name's values, %g, right-aligned in columns: a row per
 * line, a row being the last dimension (a vector on one line, a matrix
 * as its rows, a tensor of more dimensions as the rows of all of them). */
static int print_values(const qkv_st *f, const char *path, const char *name)
{
    const int i = qkv_st_find(f, name);
    if (i < 0)
        return no_such_tensor(f, path, name);
    qkv_error err = qkv_error_none();
    qkv_real *v;
    size_t n;
    if (read_values(f, path, i, &v, &n, &err) != QKV_OK)
        return cli_fail_status(err.status, "inspect: %s", err.message);
    uint64_t dims[QKV_ST_MAX_DIMS];
    const int nd = qkv_st_dims(f, i, dims, QKV_ST_MAX_DIMS);
    /* with values every dimension is at least 1; with none (n = 0) nothing is printed */
    const size_t cols = nd > 0 ? (size_t)dims[nd - 1] : 1;
    int width = 1;
    char num[32];
    for (size_t k = 0; k < n; k++) {
        const int w = snprintf(num, sizeof num, "%g", (double)v[k]);
        width = w > width ? w : width;
    }
    for (size_t k = 0; k < n; k++) {
        snprintf(num, sizeof num, "%g", (double)v[k]);
        printf("%s%*s", k % cols != 0 ? " " : "", width, num);
        if ((k + 1) % cols == 0)
            putchar('\n');
    }
    free(v);
    return CLI_OK;
}

/* One tensor's row of the table, its parts as printed. */
typedef struct row {
    char *name;             /* escaped */
    char shape[8 * 21 + 2]; /* "[2,3]": up to 8 dimensions of 20 digits */
    char count[24];
    char stat[4][32]; /* min, max, mean, RMS; "-" with no values, "?" unread */
} row;

/* Fills r for tensor i: the statistics of its values, or err with why
 * they cannot be read. */
static qkv_status fill_row(const qkv_st *f, const char *path, int i, row *r, qkv_error *err)
{
    uint64_t dims[QKV_ST_MAX_DIMS];
    const int nd = qkv_st_dims(f, i, dims, QKV_ST_MAX_DIMS);
    size_t used = (size_t)snprintf(r->shape, sizeof r->shape, "[");
    for (int d = 0; d < nd; d++)
        used += (size_t)snprintf(r->shape + used, sizeof r->shape - used,
                                 d ? ",%" PRIu64 : "%" PRIu64, dims[d]);
    snprintf(r->shape + used, sizeof r->shape - used, "]");
    snprintf(r->count, sizeof r->count, "%zu", qkv_st_numel(f, i));
    for (int k = 0; k < 4; k++)
        snprintf(r->stat[k], sizeof r->stat[k], "%s", qkv_st_numel(f, i) > 0 ? "?" : "-");
    if ((r->name = escaped(qkv_st_name(f, i))) == NULL)
        return qkv_error_set(err, QKV_ERR_NOMEM, "%s: out of memory", path);
    if (qkv_st_numel(f, i) == 0)
        return QKV_OK;
    qkv_real *v;
    size_t n;
    qkv_status s = read_values(f, path, i, &v, &n, err);
    if (s != QKV_OK)
        return s;
    const stats st = summarize(v, n);
    const double x[4] = {st.min, st.max, st.mean, st.rms};
    for (int k = 0; k < 4; k++)
        snprintf(r->stat[k], sizeof r->stat[k], "%g", x[k]);
    free(v);
    return QKV_OK;
}

/* Prints what f holds: a line of counts, the metadata (key = value, both
 * escaped), then a table of its tensors. Each tensor whose values cannot
 * be read has "?" for its statistics and a line on stderr, and fails
 * the command. */
static int print_summary(const qkv_st *f, const char *path)
{
    const int n = qkv_st_count(f), n_meta = qkv_st_meta_count(f);
    row *rows = calloc(n > 0 ? (size_t)n : 1, sizeof *rows);
    qkv_error *errs = calloc(n > 0 ? (size_t)n : 1, sizeof *errs);
    if (rows == NULL || errs == NULL) {
        free(rows);
        free(errs);
        return cli_fail_status(QKV_ERR_NOMEM, "inspect: %s: out of memory", path);
    }
    size_t total = 0;
    int wn = 6, ws = 5, wc = 6; /* the widths of "tensor", "shape", "values" */
    for (int i = 0; i < n; i++) {
        errs[i] = qkv_error_none();
        fill_row(f, path, i, &rows[i], &errs[i]);
        total += qkv_st_numel(f, i);
        const int a = rows[i].name ? cli_text_width(rows[i].name) : 0;
        const int b = (int)strlen(rows[i].shape), c = (int)strlen(rows[i].count);
        wn = a > wn ? a : wn;
        ws = b > ws ? b : ws;
        wc = c > wc ? c : wc;
    }
    cli_put_safe(stdout, path);
    printf(": %d tensor%s, %zu value%s, %d metadata entr%s\n", n, n == 1 ? "" : "s", total,
           total == 1 ? "" : "s", n_meta, n_meta == 1 ? "y" : "ies");
    if (n_meta > 0)
        printf("\nmetadata:\n");
    for (int i = 0; i < n_meta; i++) {
        const char *key = qkv_st_meta_key(f, i);
        printf("  ");
        cli_put_safe(stdout, key);
        printf(" = ");
        cli_put_safe(stdout, qkv_st_meta(f, key));
        printf("\n");
    }
    if (n > 0) {
        printf("\n");
        cli_print_padded(stdout, "tensor", wn);
        printf("  %-5s  %-*s  %*s  %12s  %12s  %12s  %12s\n", "dtype", ws, "shape", wc, "values",
               "min", "max", "mean", "rms");
    }
    for (int i = 0; i < n; i++) {
        const row *r = &rows[i];
        cli_print_padded(stdout, r->name ? r->name : "?", wn);
        printf("  %-5s  %-*s  %*s  %12s  %12s  %12s  %12s\n", qkv_st_dtype(f, i), ws, r->shape, wc,
               r->count, r->stat[0], r->stat[1], r->stat[2], r->stat[3]);
    }
    fflush(stdout); /* the table before the errors that follow it */
    int rc = CLI_OK;
    for (int i = 0; i < n; i++) {
        if (errs[i].status != QKV_OK)
            rc = cli_fail_status(errs[i].status, "inspect: %s", errs[i].message);
        free(rows[i].name);
    }
    free(rows);
    free(errs);
    return rc;
}

/* CLI_OK, or a usage error for a FILE that names no file to read: empty,
 * "-" (no standard input here) or spelt as a directory, as a file
 * option's is (cli.h). */
static int check_file_arg(const char *path)
{
    const char *slash = strrchr(path, '/'), *base = slash != NULL ? slash + 1 : path;
    if (*path == '\0')
        return cli_usage_error("inspect", "the file name is empty");
    if (strcmp(path, "-") == 0)
        return cli_usage_error("inspect",
                               "'-' is not standard input here; write ./- for a file named '-'");
    if (*base == '\0' || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        return cli_usage_error("inspect", "'%s' names a directory, not a file", path);
    return CLI_OK;
}

int cmd_inspect(int argc, char **argv)
{
    const char *values = NULL;
    char *file[1];
    int npos = 0;
    const cli_opt opts[] = {
        {"values", OPT_STR, &values, 0, 0,
         "NAME: print this tensor's values instead, a row per line (a matrix as its rows)"},
    };
    int r = cli_parse(argc, argv, opts, 1, "[--values NAME] FILE",
                      "Shows what a safetensors file holds, without a model: its metadata,\n"
                      "then for each tensor its dtype, shape, number of values, and their\n"
                      "minimum, maximum, mean and root mean square. Any writer's file will do,\n"
                      "such as the checkpoint 'qkv train --save FILE' writes. The dtypes read\n"
                      "are F16, BF16, F32 and F64, each value as the loader reads it (F16, BF16\n"
                      "and F32 exactly, F64 rounded to float32 in a float build; each must be\n"
                      "finite).",
                      file, 1, &npos);
    if (r != CLI_OK)
        return r;
    if (npos != 1)
        return cli_usage_error("inspect",
                               "give one safetensors file, e.g. qkv inspect out/coref.safetensors");
    if ((r = check_file_arg(file[0])) != CLI_OK)
        return r;
    qkv_error err = qkv_error_none();
    qkv_st *f = qkv_st_open(file[0], &err);
    if (f == NULL)
        return cli_fail_status(err.status, "inspect: %s", err.message);
    r = values != NULL ? print_values(f, file[0], values) : print_summary(f, file[0]);
    qkv_st_close(f);
    return r;
}
