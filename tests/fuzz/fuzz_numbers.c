/*
 * fuzz_numbers.c - libFuzzer target: the command line's strict number and
 * list parsers, and the task's level lists, on arbitrary strings. Whatever
 * they accept must be in range and must print back to the same value.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    long long ll;
    uint64_t u;
    double d;
    char back[64];
    if (cli_parse_ll(s, &ll) == 0) {
        snprintf(back, sizeof back, "%lld", ll);
        if (strcmp(back, s) != 0 && !(s[0] == '0' || (s[0] == '-' && s[1] == '0')))
            abort(); /* only leading zeros may print differently */
    }
    /* a digit first, or a minus and zeros only ("-0", "-00"), which is 0 */
    if (cli_parse_u64(s, &u) == 0 && (s[0] < '0' || s[0] > '9') &&
        !(s[0] == '-' && s[1] != '\0' && strspn(s + 1, "0") == strlen(s + 1) && u == 0))
        abort();
    if (cli_parse_double(s, &d) == 0 && (d != d || strchr(s, '+') == s || s[0] == ' '))
        abort();
    int list[16];
    int n = cli_int_list(s, list, 16, 1, 4096);
    if (n == 0 || n > 16)
        abort(); /* a list has at least one item, or is refused with -1 */
    for (int i = 0; i < n; i++)
        if (list[i] < 1 || list[i] > 4096)
            abort();
    unsigned levels = qkv_coref_parse_levels(s);
    if (levels & ~QKV_COREF_ALL_LEVELS)
        abort();
    free(s);
    return 0;
}
