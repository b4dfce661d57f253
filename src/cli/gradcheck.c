/*
 * gradcheck.c - `qkv gradcheck`: run every built-in gradient check and print
 * the table. Exits 1 if any check fails.
 */
#include "cli.h"

int cmd_gradcheck(int argc, char **argv)
{
    int r = cli_parse(argc, argv, NULL, 0, "",
                      "Compares the tape's gradient of every op, and of the attention\n"
                      "compositions, with central finite differences. Relative error is\n"
                      "|analytic - numeric| / max(|analytic|, |numeric|, floor).",
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
    printf("%-30s %8s %13s %13s  %s\n", "op", "entries", "max abs err", "max rel err", "result");
    for (int i = 0; i < n; i++) {
        const char *name = "?";
        qkv_gradcheck_result res;
        qkv_status s = qkv_gradcheck_builtin(i, &name, &res);
        if (s != QKV_OK) {
            cli_print_padded(stdout, name, 30);
            printf(" %s\n", qkv_status_string(s));
            failed++;
            continue;
        }
        failed += !res.passed;
        /* a pass above the ops' tolerance is within the check's looser one */
        const int above = res.passed && res.max_rel > tol;
        looser += above;
        cli_print_padded(stdout, name, 30);
        printf(" %8zu %13.3e %13.3e  %s\n", res.checked, res.max_abs, res.max_rel,
               !res.passed ? "FAIL"
               : above     ? "pass *"
                           : "pass");
    }
    if (looser > 0)
        printf("\n* above %g, within the layers' tolerance of %g\n", tol, most);
    printf("\n%d of %d checks passed\n", n - failed, n);
    return failed ? CLI_FAIL : CLI_OK;
}
