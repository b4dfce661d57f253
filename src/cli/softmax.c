/*
 * softmax.c - `qkv softmax`: the tutorial's comparison of linear and
 * exponential normalisation, z/Σz against e^z/Σe^z.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define MAX_VEC 8
#define MAX_LEN 32

/* p[0..n) = softmax(z) by the library's softmax op, with no gradient. */
static qkv_status softmax_of(const double *z, int n, double *p)
{
    qkv_error err = qkv_error_none();
    qkv_tape *t = qkv_tape_new(0, &err);
    if (t == NULL) {
        cli_fail("softmax: %s", err.message);
        return err.status;
    }
    qkv_tape_set_grad(t, 0);
    qkv_tensor *x = qkv_tape_tensor(t, 1, &n, 0);
    for (int i = 0; !qkv_tensor_is_nil(x) && i < n; i++)
        x->data[i] = (qkv_real)z[i];
    qkv_tensor *y = qkv_softmax(t, x);
    qkv_status s = qkv_tape_status(t);
    if (s != QKV_OK)
        cli_fail("softmax: %s", qkv_tape_error(t));
    for (int i = 0; s == QKV_OK && i < n; i++)
        p[i] = y->data[i];
    qkv_tape_free(t);
    return s;
}

/* Parses "1,2,-0.5" into out; returns the count or -1. */
/* The largest magnitude a qkv_real holds. */
#ifdef QKV_DOUBLE
#define REAL_MAX DBL_MAX
#else
#define REAL_MAX FLT_MAX
#endif

/* Parses "1,2,-0.5" strictly into out (cli_parse_double per item, no empty
 * item): the count, or -1. A number too large for qkv_real is refused, not
 * turned into inf and a NaN softmax. */
static int parse_vector(const char *s, double *out, int max)
{
    char item[64];
    int n = 0;
    for (const char *p = s;; p++) {
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof item || n >= max)
            return -1;
        memcpy(item, p, len);
        item[len] = '\0';
        if (cli_parse_double(item, &out[n]) != 0 || fabs(out[n]) > REAL_MAX)
            return -1;
        n++;
        p += len;
        if (*p == '\0')
            return n;
    }
}

int cmd_softmax(int argc, char **argv)
{
    const char *csv = NULL;
    char *vec[MAX_VEC];
    int nvec = 0;
    const cli_opt opts[] = {
        {"csv", OPT_PATH, &csv, 0, 0,
         "FILE: also write vector,i,z,linear,softmax rows (vector as 1;2;3)"},
    };
    int r = cli_parse(argc, argv, opts, 1, "[--csv FILE] [VECTOR ...]",
                      "Normalises each VECTOR (comma-separated numbers; default 1,2,3 and\n"
                      "-1,2,-0.5, the tutorial's examples) two ways: linearly, z/Σz, and with\n"
                      "softmax, e^z/Σe^z. Linear weights can be negative or blow up.",
                      vec, MAX_VEC, &nvec);
    if (r != CLI_OK)
        return r;
    char *defaults[2] = {"1,2,3", "-1,2,-0.5"};
    char **use = nvec ? vec : defaults;
    nvec = nvec ? nvec : 2;
    FILE *out = NULL;
    qkv_error err = qkv_error_none();
    if (csv != NULL && (out = cli_csv_create(csv, "vector,i,z,linear,softmax", &err)) == NULL)
        return cli_fail("softmax: %s", err.message);
    for (int v = 0; v < nvec && r == CLI_OK; v++) {
        double z[MAX_LEN], p[MAX_LEN];
        int n = parse_vector(use[v], z, MAX_LEN);
        if (n <= 0) {
            r = cli_usage_error("softmax", "'%s' is not a list of up to %d numbers within ±%g",
                                use[v], MAX_LEN, (double)REAL_MAX);
            break;
        }
        char label[MAX_LEN * 24] = ""; /* "1;2;3": the vector without commas */
        size_t used = 0;
        double sum = 0;
        for (int i = 0; i < n; i++) {
            used += (size_t)snprintf(label + used, sizeof label - used, i ? ";%g" : "%g", z[i]);
            sum += z[i];
        }
        if (softmax_of(z, n, p) != QKV_OK) {
            r = CLI_FAIL;
            break;
        }
        printf("z = [%s]   Σz = %g\n", use[v], sum);
        printf("  %3s %10s %12s %12s\n", "i", "z", "z/Σz", "e^z/Σe^z");
        for (int i = 0; i < n; i++) {
            double lin = sum != 0 ? z[i] / sum : NAN;
            printf("  %3d %10g %12.4f %12.4f%s\n", i, z[i], lin, p[i],
                   sum == 0             ? "   <- undefined: Σz = 0"
                   : lin < 0 || lin > 1 ? "   <- not a weight"
                                        : "");
            if (out != NULL)
                fprintf(out, "%s,%d,%g,%.6g,%.6g\n", label, i, z[i], lin, p[i]);
        }
        printf("\n");
    }
    if (out != NULL && cli_fclose(out) != 0 && r == CLI_OK)
        r = cli_fail("softmax: cannot write %s", csv);
    return r;
}
