/*
 * test_demo.c - `qkv demo` against the tutorial's program. The expected
 * texts in tests/data were printed by CPython (scripts/golden.py runs
 * scripts/demo_ref.py and checks it against ../shared/seed/selfattn_demo.py).
 */
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

static void check_demo(const char *golden, int d_model, int d_k, uint64_t seed, int scaled)
{
    FILE *want_f = fopen(golden, "rb");
    ck_assert_msg(want_f != NULL, "cannot open %s", golden);
    char *want = slurp(want_f);
    fclose(want_f);
    FILE *got_f = tmpfile();
    ck_assert_int_eq(demo_print(got_f, d_model, d_k, 4, seed, scaled), CLI_OK);
    char *got = slurp(got_f);
    fclose(got_f);
    /* compare line by line so a failure names the first differing line */
    char *ws = NULL, *gs = NULL;
    char *wl = strtok_r(want, "\n", &ws), *gl = strtok_r(got, "\n", &gs);
    for (int line = 1; wl != NULL || gl != NULL; line++) {
        ck_assert_msg(wl != NULL && gl != NULL && strcmp(wl, gl) == 0,
                      "%s line %d:\n  want: %s\n  got:  %s", golden, line, wl ? wl : "(end)",
                      gl ? gl : "(end)");
        wl = strtok_r(NULL, "\n", &ws);
        gl = strtok_r(NULL, "\n", &gs);
    }
    free(want);
    free(got);
}

START_TEST(test_demo_prints_the_tutorial_numbers)
{
    check_demo(QKV_TEST_DATA "/demo_default.txt", 8, 6, 42, 1);
}
END_TEST

START_TEST(test_demo_follows_changed_settings)
{
    check_demo(QKV_TEST_DATA "/demo_d10_k16_s7.txt", 10, 16, 7, 1);
    check_demo(QKV_TEST_DATA "/demo_noscale.txt", 8, 6, 42, 0);
}
END_TEST

Suite *demo_suite(void)
{
    Suite *s = suite_create("demo");
    TCase *tc = tcase_create("cpython");
    tcase_add_test(tc, test_demo_prints_the_tutorial_numbers);
    tcase_add_test(tc, test_demo_follows_changed_settings);
    suite_add_tcase(s, tc);
    return s;
}
