/*
 * test_demo.c - `qkv demo` against the tutorial's program. The expected
 * texts in tests/data were printed by CPython (scripts/golden.py runs
 * scripts/mha_demo.py and checks it against ../shared/seed/selfattn_demo.py).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests.h"
#include "cli/cli.h"

static char *slurp(FILE *f)
{
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *buf = calloc((size_t)n + 1, 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    return buf;
}

/* Compares the demo's output for c with want, line by line, so that a
 * failure names the first differing line. */
static void compare(const char *label, char *want, const demo_config *c)
{
    FILE *got_f = tmpfile();
    ck_assert_int_eq(demo_print(got_f, c), CLI_OK);
    char *got = slurp(got_f);
    fclose(got_f);
    char *ws = NULL, *gs = NULL;
    char *wl = strtok_r(want, "\n", &ws), *gl = strtok_r(got, "\n", &gs);
    for (int line = 1; wl != NULL || gl != NULL; line++) {
        ck_assert_msg(wl != NULL && gl != NULL && strcmp(wl, gl) == 0,
                      "%s line %d:\n  want: %s\n  got:  %s", label, line, wl ? wl : "(end)",
                      gl ? gl : "(end)");
        wl = strtok_r(NULL, "\n", &ws);
        gl = strtok_r(NULL, "\n", &gs);
    }
    free(got);
}

/* The demo against a golden text printed by CPython. */
static void check_demo(const char *golden, int d_model, int d_k, uint64_t seed, int scaled,
                       int heads)
{
    FILE *want_f = fopen(golden, "rb");
    ck_assert_msg(want_f != NULL, "cannot open %s", golden);
    char *want = slurp(want_f);
    fclose(want_f);
    const demo_config c = {d_model, d_k, 4, heads, seed, scaled};
    compare(golden, want, &c);
    free(want);
}

/* The demo against scripts/mha_demo.py, run now by CPython. */
static void check_live(const demo_config *c)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "'%s' '%s/mha_demo.py' --heads %d --d-model %d --d-k %d --seq-len %d --seed %llu %s",
             QKV_PYTHON, QKV_SCRIPTS, c->heads, c->d_model, c->d_k, c->seq_len,
             (unsigned long long)c->seed, c->scaled ? "" : "--no-scale");
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t cap = 1 << 16, n = 0;
    char *want = malloc(cap);
    for (size_t k; (k = fread(want + n, 1, cap - 1 - n, p)) > 0;)
        n += k;
    want[n] = '\0';
    ck_assert_msg(pclose(p) == 0, "%s failed", cmd);
    compare(cmd, want, c);
    free(want);
}

START_TEST(test_demo_prints_the_tutorial_numbers)
{
    /* --heads 1 is the default: the tutorial's layer */
    check_demo(QKV_TEST_DATA "/demo_default.txt", 8, 6, 42, 1, 1);
}
END_TEST

START_TEST(test_demo_follows_changed_settings)
{
    check_demo(QKV_TEST_DATA "/demo_d10_k16_s7.txt", 10, 16, 7, 1, 1);
    check_demo(QKV_TEST_DATA "/demo_noscale.txt", 8, 6, 42, 0, 1);
}
END_TEST

START_TEST(test_multi_head_demo_matches_the_python_reference)
{
    /* goldens printed by scripts/mha_demo.py (scripts/golden.py) */
    check_demo(QKV_TEST_DATA "/demo_heads2.txt", 8, 6, 42, 1, 2);
    check_demo(QKV_TEST_DATA "/demo_heads3_k12.txt", 8, 12, 42, 1, 3);
    /* and the script itself, now, at other settings */
    const demo_config c[] = {
        {8, 6, 4, 2, 42, 1}, {8, 6, 4, 6, 42, 1}, {10, 16, 7, 4, 7, 0}, {8, 6, 4, 1, 42, 1}};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        check_live(&c[i]);
}
END_TEST

Suite *demo_suite(void)
{
    Suite *s = suite_create("demo");
    TCase *tc = tcase_create("cpython");
    tcase_add_test(tc, test_demo_prints_the_tutorial_numbers);
    tcase_add_test(tc, test_demo_follows_changed_settings);
    tcase_add_test(tc, test_multi_head_demo_matches_the_python_reference);
    suite_add_tcase(s, tc);
    return s;
}
