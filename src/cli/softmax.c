/*
 * softmax.c - `qkv softmax`: the tutorial's comparison of linear and
 * exponential normalisation, z/Σz against e^z/Σe^z.
 */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define MAX_VEC 8  /* vectors a command takes */
#define MAX_LEN 32 /* numbers in a vector */

/* p[0..n) = softmax(z) by the library's softmax op, with no gradient. */
static qkv_status softmax_of(const double *z, int n, double *p)
{
    qkv_error err = qkv_error_none();
    qkv_tape *t = qkv_tape_new(0, &err);
    if (t == NULL) {
        cli_fail_status(err.status, "softmax: %s", err.message);
        return err.status;
    }
    qkv_tape_set_grad(t, 0);
    qkv_tensor *x = qkv_tape_tensor(t, 1, &n, 0);
    for (int i = 0; !qkv_tensor_is_nil(x) && i < n; i++)
        x->data[i] = (qkv_real)z[i];
    qkv_tensor *y = qkv_softmax(t, x);
    qkv_status s = qkv_tape_status(t);
    if (s != QKV_OK)
        cli_fail_status(qkv_tape_status(t), "softmax: %s", qkv_tape_error(t));
    for (int i = 0; s == QKV_OK && i < n; i++)
        p[i] = y->data[i];
    qkv_tape_free(t);
    return s;
}

/* *g = ∂p_k/∂z_k for p = softmax(z·ln_b), by the tape: z → scale by ln b
 * → softmax → p_k (as Σ p·onehot_k) → backward. */
static qkv_status self_gradient(const double *z, int n, double ln_b, int k, double *g)
{
    qkv_error err = qkv_error_none();
    qkv_tape *t = qkv_tape_new(0, &err);
    if (t == NULL) {
        cli_fail_status(err.status, "softmax: %s", err.message);
        return err.status;
    }
    qkv_tensor *x = qkv_tape_tensor(t, 1, &n, 1), *e = qkv_tape_tensor(t, 1, &n, 0);
    for (int i = 0; !qkv_tensor_is_nil(x) && !qkv_tensor_is_nil(e) && i < n; i++) {
        x->data[i] = (qkv_real)z[i];
        e->data[i] = i == k;
    }
    qkv_tensor *pk = qkv_sum(t, qkv_mul(t, qkv_softmax(t, qkv_scale(t, x, ln_b)), e));
    qkv_status s = qkv_tape_status(t);
    if (s == QKV_OK)
        s = qkv_backward(t, pk);
    if (s != QKV_OK)
        cli_fail_status(qkv_tape_status(t), "softmax: %s", qkv_tape_error(t));
    else
        *g = x->grad[k];
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

#define MAX_BASES 4
#define MAX_BASE_CHARS 64 /* a base as typed: e to double precision is 17 */

/* Parses "2,e,10" into distinct bases > 1 (at most 1e6; "e" is e) and
 * their labels: the count, or -1; or -2 for an item longer than
 * MAX_BASE_CHARS, which *bad (its length in *bad_len) points at. */
static int parse_bases(const char *s, double *base, char (*label)[MAX_BASE_CHARS + 1],
                       const char **bad, int *bad_len)
{
    char item[MAX_BASE_CHARS + 1];
    int n = 0;
    for (const char *p = s;; p++) {
        size_t len = strcspn(p, ",");
        if (len >= sizeof item) {
            *bad = p;
            *bad_len = len > INT_MAX ? INT_MAX : (int)len;
            return -2;
        }
        if (len == 0 || n >= MAX_BASES)
            return -1;
        memcpy(item, p, len);
        item[len] = '\0';
        if (strcmp(item, "e") == 0)
            base[n] = QKV_ABLATE_E;
        else if (cli_parse_double(item, &base[n]) != 0 || !(base[n] > 1) || base[n] > 1e6)
            return -1;
        for (int k = 0; k < n; k++)
            if (base[k] == base[n])
                return -1; /* a repeat: the same column twice, one CSV name */
        strcpy(label[n++], item);
        p += len;
        if (*p == '\0')
            return n;
    }
}

/* Checks that s is a vector parse_vector takes and that z·ln b fits
 * qkv_real for each of the nb bases: CLI_OK, or CLI_USAGE after the
 * message. */
static int check_vector(const char *s, const double *base, char (*blabel)[MAX_BASE_CHARS + 1],
                        int nb)
{
    double z[MAX_LEN];
    const int n = parse_vector(s, z, MAX_LEN);
    if (n <= 0)
        return cli_usage_error("softmax", "'%s' is not a list of up to %d numbers within ±%g", s,
                               MAX_LEN, (double)REAL_MAX);
    for (int k = 0; k < nb; k++)
        for (int i = 0; i < n; i++)
            if (fabs(z[i] * log(base[k])) > REAL_MAX)
                return cli_usage_error("softmax",
                                       "'%s': %g·ln %s is too large for the scalar type (±%g)", s,
                                       z[i], blabel[k], (double)REAL_MAX);
    return CLI_OK;
}

/* x in at most width characters, in buf (len bytes): with `decimals`
 * decimals ("%.4f"), or "%g" for decimals < 0; a value too wide for that
 * (3e38 to 4 decimals has 39 digits), or not 0 but shown as 0 ("-0.0000"
 * for -1e-30), in e-notation with as many digits as fit ("3.000e+38",
 * "-1.80e+308"). inf and nan as printf has them. Returns buf. */
static const char *fit(char *buf, size_t len, double x, int width, int decimals)
{
    if (decimals >= 0)
        snprintf(buf, len, "%.*f", decimals, x);
    else
        snprintf(buf, len, "%g", x);
    const int lost = x != 0 && strtod(buf, NULL) == 0;
    if (!isfinite(x) || ((int)strlen(buf) <= width && !lost))
        return buf;
    for (int d = 3; d >= 0; d--) /* "-1.798e+308" is 11 characters */
        if (snprintf(buf, len, "%.*e", d, x) <= width)
            break;
    return buf;
}

/* Prints " " and s right-aligned in a field of width columns. */
static void print_right(const char *s, int width)
{
    putchar(' ');
    cli_print_right(stdout, s, width);
}

static int argmax(const double *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        best = x[i] > x[best] ? i : best;
    return best;
}

static int argmin(const double *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        best = x[i] < x[best] ? i : best;
    return best;
}

int cmd_softmax(int argc, char **argv)
{
    const char *csv = NULL, *bases = NULL;
    char *vec[MAX_VEC], **all = malloc(sizeof *all * (size_t)argc); /* any count, to name it */
    int nvec = 0;
    if (all == NULL)
        return cli_fail_status(QKV_ERR_NOMEM, "softmax: out of memory");
    const cli_opt opts[] = {
        {"csv", OPT_FILE, &csv, 0, 0,
         "FILE: also write vector,i,z,linear,softmax rows (vector as 1;2;3)"},
        {"base", OPT_STR, &bases, 0, 0,
         "LIST: also normalise in these bases, b^z/Σb^z (e.g. 2,e,10; up to 4)"},
    };
    _Static_assert(MAX_VEC == 8 && MAX_LEN == 32, "the help states the limits");
    static const char about[] =
        "Normalises each VECTOR (at most 8 VECTORs, each of up to 32 comma-separated\n"
        "numbers; default 1,2,3 and -1,2,-0.5, the tutorial's examples) two ways:\n"
        "linearly, z/Σz, and with softmax, e^z/Σe^z. Linear weights can be negative\n"
        "or blow up.\n"
        "With --base, also b^z/Σb^z = e^(z·ln b)/Σe^(z·ln b): base b is base e at\n"
        "temperature 1/ln b, and its gradient carries the factor ln b. The CSV\n"
        "then gets one more column per base, base_<b>.";
    int r = cli_parse(argc, argv, opts, 2, "[--csv FILE] [--base LIST] [VECTOR ...]", about, all,
                      argc, &nvec);
    for (int v = 0; v < nvec && v < MAX_VEC; v++)
        vec[v] = all[v];
    free(all);
    if (r != CLI_OK)
        return r;
    if (nvec > MAX_VEC)
        return cli_usage_error("softmax", "softmax takes at most %d vectors, not %d", MAX_VEC,
                               nvec);
    double base[MAX_BASES];
    char blabel[MAX_BASES][MAX_BASE_CHARS + 1] = {{0}};
    const char *bad = NULL;
    int nb = 0, bad_len = 0;
    if (bases != NULL && (nb = parse_bases(bases, base, blabel, &bad, &bad_len)) == -2)
        return cli_usage_error("softmax", "--base: the base '%.*s' is longer than %d characters",
                               bad_len, bad, MAX_BASE_CHARS);
    if (nb < 0)
        return cli_usage_error("softmax",
                               "--base: '%s' is not a list of up to %d distinct bases, each e or a "
                               "number in (1, 1e6]",
                               bases, MAX_BASES);
    char *defaults[2] = {"1,2,3", "-1,2,-0.5"};
    char **use = nvec ? vec : defaults;
    nvec = nvec ? nvec : 2;
    /* every vector before any table or CSV row: a bad one after good ones
     * would leave a CSV cut short, which a plot takes for the whole */
    for (int v = 0; v < nvec; v++)
        if ((r = check_vector(use[v], base, blabel, nb)) != CLI_OK)
            return r;
    FILE *out = NULL;
    qkv_error err = qkv_error_none();
    char header[64 + MAX_BASES * (8 + MAX_BASE_CHARS)] = "vector,i,z,linear,softmax";
    for (int k = 0; k < nb; k++)
        snprintf(header + strlen(header), sizeof header - strlen(header), ",base_%s", blabel[k]);
    if (csv != NULL && (out = cli_csv_create(csv, header, &err)) == NULL)
        return cli_fail_status(err.status, "softmax: %s", err.message);
    for (int v = 0; v < nvec && r == CLI_OK; v++) {
        double z[MAX_LEN], p[MAX_LEN];
        const int n = parse_vector(use[v], z, MAX_LEN); /* > 0: checked above */
        char label[MAX_LEN * 24] = "";                  /* "1;2;3": the vector without commas */
        size_t used = 0;
        double sum = 0;
        for (int i = 0; i < n; i++) {
            used += (size_t)snprintf(label + used, sizeof label - used, i ? ";%g" : "%g", z[i]);
            sum += z[i];
        }
        double pb[MAX_BASES][MAX_LEN], zb[MAX_LEN];
        if (softmax_of(z, n, p) != QKV_OK) {
            r = CLI_FAIL;
            break;
        }
        for (int k = 0; k < nb && r == CLI_OK; k++) { /* the library's softmax of z·ln b */
            for (int i = 0; i < n; i++)
                zb[i] = z[i] * log(base[k]); /* within ±REAL_MAX: checked above */
            if (softmax_of(zb, n, pb[k]) != QKV_OK)
                r = CLI_FAIL;
        }
        if (r != CLI_OK)
            break;
        printf("z = [%s]   Σz = %g\n", use[v], sum);
        printf("  %3s %10s", "i", "z");
        print_right("z/Σz", 12);
        print_right("e^z/Σe^z", 12);
        int w[MAX_BASES]; /* a base's column: 12, or its header's width */
        for (int k = 0; k < nb; k++) {
            char h[2 * MAX_BASE_CHARS + 16];
            snprintf(h, sizeof h, "%.*s^z/Σ%.*s^z", MAX_BASE_CHARS, blabel[k], MAX_BASE_CHARS,
                     blabel[k]);
            w[k] = cli_text_width(h) > 12 ? cli_text_width(h) : 12;
            print_right(h, w[k]);
        }
        printf("\n");
        for (int i = 0; i < n; i++) {
            double lin = sum != 0 ? z[i] / sum : NAN;
            if (lin == 0)
                lin = 0; /* 0/(-5) is -0: a weight of nothing has no sign */
            char zs[32], ls[32];
            printf("  %3d %10s %12s %12.4f", i, fit(zs, sizeof zs, z[i], 10, -1),
                   fit(ls, sizeof ls, lin, 12, 4), p[i]);
            for (int k = 0; k < nb; k++)
                printf(" %*.4f", w[k], pb[k][i]);
            printf("%s\n", sum == 0             ? "   <- undefined: Σz = 0"
                           : lin < 0 || lin > 1 ? "   <- not a weight"
                                                : "");
            if (out != NULL) {
                cli_csv_printf(out, "%s,%d,%g,%.6g,%.6g", label, i, cli_num(z[i]), cli_num(lin),
                               cli_num(p[i]));
                for (int k = 0; k < nb; k++)
                    cli_csv_printf(out, ",%.6g", cli_num(pb[k][i]));
                cli_csv_printf(out, "\n");
            }
        }
        if (nb > 0) {
            /* the labels below span the columns i, z and z/Σz (27) */
            printf("  %3s %10s %12s %12s", "", "ln b", "", "1");
            for (int k = 0; k < nb; k++)
                printf(" %*.4f", w[k], log(base[k]));
            printf("\n  ");
            cli_print_padded(stdout, "largest / smallest weight", 27);
            printf(" %12.4g", p[argmax(p, n)] / p[argmin(p, n)]);
            for (int k = 0; k < nb; k++)
                printf(" %*.4g", w[k], pb[k][argmax(pb[k], n)] / pb[k][argmin(pb[k], n)]);
            printf("\n");
            /* the gradient: ∂p_k/∂z_k = ln b · p_k(1 - p_k), by the tape */
            const int k = argmax(p, n);
            double g;
            if (self_gradient(z, n, 1, k, &g) != QKV_OK) {
                r = CLI_FAIL;
                break;
            }
            printf("  ");
            cli_print_padded(stdout, "∂p/∂z at the largest z", 27);
            printf(" %12.4f", g);
            for (int j = 0; j < nb && r == CLI_OK; j++) {
                if (self_gradient(z, n, log(base[j]), k, &g) != QKV_OK)
                    r = CLI_FAIL;
                else
                    printf(" %*.4f", w[j], g);
            }
            if (r != CLI_OK)
                break;
            printf("\n  ");
            cli_print_padded(stdout, "= ln b · p(1 - p)", 27);
            printf(" %12.4f", p[k] * (1 - p[k]));
            for (int j = 0; j < nb; j++)
                printf(" %*.4f", w[j], log(base[j]) * pb[j][k] * (1 - pb[j][k]));
            printf("\n");
        }
        printf("\n");
    }
    if (out != NULL && cli_csv_end(out, csv, r == CLI_OK) != 0 && r == CLI_OK)
        r = cli_fail("softmax: cannot write %s: %s", csv, cli_csv_error());
    return r;
}
