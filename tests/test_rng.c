/*
 * test_rng.c - qkv's generator against CPython's random module. The golden
 * values in tests/data/rng_golden.h come from scripts/golden.py run under
 * python3; equality is exact (the doubles are stored in hex).
 */
#include <stdlib.h>
#include <string.h>

#include "tests.h"
#include "data/rng_golden.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

START_TEST(test_seed_matches_cpython_for_small_and_wide_seeds)
{
    qkv_rng g;
    for (size_t i = 0; i < COUNT(golden_seeds); i++) {
        qkv_rng_seed(&g, golden_seeds[i]);
        ck_assert_msg(qkv_rng_random(&g) == golden_first_random[i], "seed %llu",
                      (unsigned long long)golden_seeds[i]);
    }
}
END_TEST

START_TEST(test_random_matches_cpython_for_1000_draws)
{
    qkv_rng g;
    qkv_rng_seed(&g, 42);
    for (size_t i = 0; i < COUNT(golden_random_42); i++)
        ck_assert_msg(qkv_rng_random(&g) == golden_random_42[i], "draw %zu", i);
}
END_TEST

START_TEST(test_normalvariate_matches_cpython_for_1000_draws)
{
    qkv_rng g;
    qkv_rng_seed(&g, 7);
    for (size_t i = 0; i < COUNT(golden_normal_7); i++)
        ck_assert_msg(qkv_rng_normalvariate(&g, 0, 1) == golden_normal_7[i], "draw %zu", i);
    qkv_rng_seed(&g, 42);
    for (size_t i = 0; i < COUNT(golden_normal_42_sd01); i++)
        ck_assert_msg(qkv_rng_normalvariate(&g, 0, 0.1) == golden_normal_42_sd01[i], "draw %zu", i);
}
END_TEST

START_TEST(test_getrandbits_and_randbelow_match_cpython)
{
    qkv_rng g;
    qkv_rng_seed(&g, 3);
    for (size_t i = 0; i < COUNT(golden_bits_3); i++)
        ck_assert_uint_eq(qkv_rng_getrandbits(&g, 1 + (int)(i % 32)), golden_bits_3[i]);
    qkv_rng_seed(&g, 5);
    for (size_t i = 0; i < COUNT(golden_below_5); i++)
        ck_assert_uint_eq(qkv_rng_below(&g, 1 + i * 7919 % 100003), golden_below_5[i]);
}
END_TEST

/* Past 32 bits (two words, as CPython draws them), up to bounds of
 * 2^64 - 1: a shuffle or choice over more than 2^32 items draws these. */
START_TEST(test_wide_getrandbits_and_randbelow_match_cpython)
{
    qkv_rng g;
    qkv_rng_seed(&g, 3);
    for (size_t i = 0; i < COUNT(golden_bits64_3); i++)
        ck_assert_uint_eq(qkv_rng_getrandbits(&g, 33 + (int)(i % 32)), golden_bits64_3[i]);
    qkv_rng_seed(&g, 5);
    for (size_t i = 0; i < COUNT(golden_below64_5); i++)
        ck_assert_uint_eq(qkv_rng_below(&g, golden_below64_bounds[i]), golden_below64_5[i]);
    ck_assert_uint_eq(qkv_rng_getrandbits(&g, 65), 0);
}
END_TEST

START_TEST(test_shuffle_matches_cpython)
{
    qkv_rng g;
    int deck[100];
    for (int i = 0; i < 100; i++)
        deck[i] = i;
    qkv_rng_seed(&g, 11);
    qkv_rng_shuffle(&g, deck, 100, sizeof deck[0]);
    for (int i = 0; i < 100; i++)
        ck_assert_int_eq(deck[i], (int)golden_shuffle_11[i]);
    /* items of any size: 100-byte cards, each its index and a fill of
     * bytes, land in the same order, whole */
    typedef struct card {
        int id;
        unsigned char fill[96];
    } card;
    card *cards = malloc(sizeof *cards * 100);
    ck_assert_ptr_nonnull(cards);
    for (int i = 0; i < 100; i++) {
        cards[i].id = i;
        memset(cards[i].fill, i, sizeof cards[i].fill);
    }
    qkv_rng_seed(&g, 11);
    qkv_rng_shuffle(&g, cards, 100, sizeof cards[0]);
    for (int i = 0; i < 100; i++) {
        ck_assert_int_eq(cards[i].id, (int)golden_shuffle_11[i]);
        for (size_t b = 0; b < sizeof cards[i].fill; b++)
            ck_assert_int_eq(cards[i].fill[b], cards[i].id);
    }
    free(cards);
}
END_TEST

/* Each function took a NULL generator and read through it. rng.h: they
 * draw nothing; seed and shuffle do nothing, the rest return 0. */
START_TEST(test_a_null_generator_draws_nothing)
{
    qkv_rng_seed(NULL, 42);
    ck_assert_uint_eq(qkv_rng_u32(NULL), 0);
    ck_assert(qkv_rng_random(NULL) == 0);
    ck_assert(qkv_rng_normalvariate(NULL, 5, 2) == 0);
    ck_assert_uint_eq(qkv_rng_getrandbits(NULL, 8), 0);
    ck_assert_uint_eq(qkv_rng_getrandbits(NULL, 64), 0);
    ck_assert_uint_eq(qkv_rng_below(NULL, 10), 0);
    ck_assert_uint_eq(qkv_rng_choice(NULL, 10), 0);
    int deck[5] = {0, 1, 2, 3, 4};
    qkv_rng_shuffle(NULL, deck, 5, sizeof deck[0]);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(deck[i], i);
}
END_TEST

Suite *rng_suite(void)
{
    Suite *s = suite_create("rng");
    TCase *tc = tcase_create("cpython");
    tcase_add_test(tc, test_seed_matches_cpython_for_small_and_wide_seeds);
    tcase_add_test(tc, test_random_matches_cpython_for_1000_draws);
    tcase_add_test(tc, test_normalvariate_matches_cpython_for_1000_draws);
    tcase_add_test(tc, test_getrandbits_and_randbelow_match_cpython);
    tcase_add_test(tc, test_wide_getrandbits_and_randbelow_match_cpython);
    tcase_add_test(tc, test_shuffle_matches_cpython);
    tcase_add_test(tc, test_a_null_generator_draws_nothing);
    suite_add_tcase(s, tc);
    return s;
}
