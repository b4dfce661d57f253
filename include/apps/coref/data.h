/*
 * data.h - the coreference task's sentences: templates at three levels,
 * filled with names, split into train, validation and test.
 */
#ifndef QKV_COREF_DATA_H
#define QKV_COREF_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "apps/coref/vocab.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QKV_COREF_LEVELS 3
#define QKV_COREF_ALL_LEVELS 7u /* the level bit set of levels 1, 2 and 3 */

/* One sentence with one pronoun to resolve. */
typedef struct qkv_coref_example {
    int len;                       /* number of tokens */
    int ids[QKV_COREF_MAX_TOKENS]; /* (len) token ids */
    int pronoun;                   /* position of the pronoun */
    int antecedent;                /* token id of the name it refers to */
    int target;                    /* class of that name */
    int level;                     /* 1, 2 or 3 */
    int tmpl;                      /* template number within its level */
} qkv_coref_example;

/* The generated data. Level 1: one person and one pronoun. Level 2: two
 * people of different gender; the pronoun's gender decides. Level 3: longer
 * sentences with distractor words, including cataphora (pronoun first).
 * train and val use the same templates with disjoint (template, names)
 * combinations; test uses templates that never appear in training. */
typedef struct qkv_coref_data {
    qkv_coref_example *train, *val, *test; /* owned; free with qkv_coref_data_free */
    int n_train, n_val, n_test;
} qkv_coref_data;

/* Builds the splits for the levels whose bits are set in levels (bit 0 =
 * level 1, ...), shuffled deterministically by seed. Returns QKV_ERR_ARG for
 * an empty or unknown level set, QKV_ERR_NOMEM when memory runs out (then
 * *d is empty), each with the reason in err. */
qkv_status qkv_coref_data_build(qkv_coref_data *d, unsigned levels, uint64_t seed, qkv_error *err);

/* Frees the splits; accepts NULL and an empty data set. */
void qkv_coref_data_free(qkv_coref_data *d);

/* Writes the example's text (its tokens concatenated) into buf. */
void qkv_coref_example_text(const qkv_coref_example *ex, char *buf, size_t len);

/* Parses a level list such as "1,2,3" or "2" into a bit set; 0 for
 * anything else (an empty item, a trailing comma, a level given twice). */
unsigned qkv_coref_parse_levels(const char *s);

#ifdef __cplusplus
}
#endif
#endif
