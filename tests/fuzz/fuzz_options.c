/*
 * fuzz_options.c - libFuzzer target: the command line's option parser and
 * list splitter on arbitrary arguments (the input split at NUL bytes), with
 * one option of every kind. Whatever cli_parse accepts must be in range
 * and point into the arguments, and no value given as the next argument
 * may read as an option; a list must split into non-empty items that
 * join back to the text; and nothing may crash or leak.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

#define MAX_ARGS 16

/* 1 if p is one of the n strings of argv */
static int is_arg(const char *p, char **argv, int n)
{
    for (int i = 0; i < n; i++)
        if (p == argv[i] || (p > argv[i] && p <= argv[i] + strlen(argv[i])))
            return 1;
    return 0;
}

static void check_list(const char *s)
{
    char buf[64], *items[4], back[64] = "";
    int n = cli_split_list(s, buf, sizeof buf, items, 4);
    if (n == 0 || n > 4)
        abort();
    for (int i = 0; i < n; i++) {
        if (items[i][0] == '\0' || strchr(items[i], ',') != NULL)
            abort();
        snprintf(back + strlen(back), sizeof back - strlen(back), i ? ",%s" : "%s", items[i]);
    }
    if (n > 0 && strcmp(back, s) != 0)
        abort(); /* the items are the text's, in order */
    if (cli_text_width(s) < 0 || (size_t)cli_text_width(s) > 2 * strlen(s))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the messages and the help go nowhere (stdio only: a sanitizer's
     * report still reaches file descriptor 2) */
    static FILE *null;
    if (null == NULL && (null = fopen("/dev/null", "w")) == NULL)
        return 0;
    stdout = stderr = null;
    char *text = malloc(size + 1), *argv[MAX_ARGS + 1] = {"fuzz"};
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    int argc = 1;
    for (size_t i = 0; i <= size && argc <= MAX_ARGS; i += strlen(text + i) + 1)
        argv[argc++] = text + i;
    int flag = 0, n = -7, npos = -1;
    uint64_t u = 0;
    double d = -7;
    const char *str = NULL, *path = NULL, *file = NULL;
    const cli_opt opts[] = {
        {"flag", OPT_FLAG, &flag, 0, 0, "a flag"},
        {"n", OPT_INT, &n, 1, 4096, "N: a whole number"},
        {"seed", OPT_U64, &u, 0, 0, "N: a seed"},
        {"lr", OPT_DOUBLE, &d, 1e-12, 1e300, "X: a number"},
        {"name", OPT_STR, &str, 0, 0, "NAME: a string"},
        {"out", OPT_DIR, &path, 0, 0, "DIR: a path"},
        {"file", OPT_FILE, &file, 0, 0, "FILE: a file's path"},
    };
    char *pos[2] = {NULL, NULL};
    int r = cli_parse(argc, argv, opts, 7, "[options]", "fuzz", pos, 2, &npos);
    if (r != CLI_OK && r != CLI_USAGE && r != CLI_HELP)
        abort();
    if (r == CLI_OK) {
        if (npos < 0 || npos > 2 || (flag != 0 && flag != 1))
            abort();
        for (int i = 0; i < npos; i++)
            if (!is_arg(pos[i], argv, argc))
                abort();
        if (n != -7 && (n < 1 || n > 4096))
            abort();
        if (d != -7 && !(isfinite(d) && d >= 1e-12 && d <= 1e300))
            abort();
        if (str != NULL && !is_arg(str, argv, argc))
            abort();
        /* a value given as the next argument never reads as an option
         * ("--name --flag" is refused, not the name "--flag") */
        for (int i = 1; i < argc; i++)
            if ((str == argv[i] || file == argv[i]) && argv[i][0] == '-' && argv[i][1] != '\0' &&
                !(argv[i][1] >= '0' && argv[i][1] <= '9') &&
                !(argv[i][1] == '.' && argv[i][2] >= '0' && argv[i][2] <= '9'))
                abort();
        if (path != NULL) { /* an argument less its trailing "/" and "/." ("d/." is d) */
            const size_t k = strlen(path);
            int from_arg = 0;
            for (int i = 1; i < 2 * argc && !from_arg; i++) { /* each whole, then after "=" */
                const char *a = i < argc ? argv[i] : strchr(argv[i - argc], '=');
                a = i < argc || a == NULL ? a : a + 1;
                from_arg =
                    a != NULL && strncmp(a, path, k) == 0 && strspn(a + k, "/.") == strlen(a + k);
            }
            if (k == 0 || !from_arg || (k > 1 && path[k - 1] == '/') ||
                (k > 2 && strcmp(path + k - 2, "/.") == 0))
                abort();
        }
        if (file != NULL) { /* a path, and not one that ends in a directory's name */
            const size_t k = strlen(file);
            if (!is_arg(file, argv, argc) || k == 0 || file[k - 1] == '/' ||
                strcmp(file, ".") == 0 || (k >= 2 && strcmp(file + k - 2, "/.") == 0))
                abort();
        }
    }
    for (int i = 1; i < argc; i++)
        check_list(argv[i]);
    free(text);
    return 0;
}
