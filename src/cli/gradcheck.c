/*
 * gradcheck.c - `qkv gradcheck`: run every built-in gradient check and print
 * the table. Exits 1 if any check fails.
 */
#include <stdlib.h>

#include "cli.h"

int cmd_gradcheck(int argc, char **argv)
{
    int r = cli_parse(argc, argv, NULL, 0, "",
                      "Compares the tape's gradient of every op, of the attention\n"
                      "compositions and of every layer (linear, mha, ffn, the Transformer\n"
                      "block, RNN, LSTM, GRU) with central finite differences. Relative\n"
                      "error is |analytic - numeric| / max(|analytic|, |numeric|, floor).\n"
                      "A check passes when its worst relative error is within its\n"
                      "tolerance, printed on the first line: the layers' may be looser than\n"
                      "the ops' (in float32, their longer chains of rounding). The exit\n"
                      "status is 1 when any check fails.",
                      NULL, 0, NULL);
    if (r != CLI_OK)
        return r;
    int failed = 0, looser = 0, n = qkv_gradcheck_builtin_count();
    const int is_double = sizeof(qkv_real) == sizeof(double);
    const double tol = qkv_gradcheck_default_tol();
    double most = tol; /* the loosest check's: the float32 build's layers */
    for (int i = 0; i < n; i++)
        most = qkv_gradcheck_builtin_tol(i) > most ? qkv_gradcheck_builtin_tol(i) : most;
    printf("scalar: %s   step: %g   floor: %g   tolerance: %g", is_double ? "double" : "float32",
           qkv_gradcheck_default_step(), qkv_gradcheck_default_floor(), tol);
    if (most > tol)
        printf(" (ops), up to %g (layers)", most);
    printf("\n\n");
    /* every check first, so that the name column is as wide as the
     * widest name (some are wider than 30 columns) */
    const size_t count = n > 0 ? (size_t)n : 1;
    const char **names = calloc(count, sizeof *names);
    qkv_gradcheck_result *res = calloc(count, sizeof *res);
    qkv_status *st = calloc(count, sizeof *st);
    if (names == NULL || res == NULL || st == NULL) {
        free(names);
        free(res);
        free(st);
        return cli_fail_status(QKV_ERR_NOMEM, "gradcheck: out of memory");
    }
    int width = 30;
    for (int i = 0; i < n; i++) {
        names[i] = "?";
        st[i] = qkv_gradcheck_builtin(i, &names[i], &res[i]);
        width = cli_text_width(names[i]) > width ? cli_text_width(names[i]) : width;
    }
    cli_print_padded(stdout, "op", width);
    printf(" %8s %13s %13s  %s\n", "entries", "max abs err", "max rel err", "result");
    for (int i = 0; i < n; i++) {
        cli_print_padded(stdout, names[i], width);
        if (st[i] != QKV_OK) {
            printf(" %s\n", qkv_status_string(st[i]));
            failed++;
            continue;
        }
        failed += !res[i].passed;
        /* a pass above the ops' tolerance is within the check's looser one */
        const int above = res[i].passed && res[i].max_rel > tol;
        looser += above;
        printf(" %8zu %13.3e %13.3e  %s\n", res[i].checked, res[i].max_abs, res[i].max_rel,
               !res[i].passed ? "FAIL"
               : above        ? "pass *"
                              : "pass");
    }
    free(names);
    free(res);
    free(st);
    if (looser > 0)
        printf("\n* above %g, within the layers' tolerance of %g\n", tol, most);
    printf("\n%d of %d checks passed\n", n - failed, n);
    return failed ? CLI_FAIL : CLI_OK;
}
