/*
 * coref.h - the toy Chinese coreference task: 「小明是个运动达人，他平时很爱打篮球」
 * — the pronoun 他 refers to 小明.
 *
 * A fixed vocabulary of names (with gender), pronouns and other words; a
 * greedy longest-match tokenizer over UTF-8 text; sentence templates at three
 * levels; and deterministic train / validation / test splits.
 */
#ifndef QKV_COREF_H
#define QKV_COREF_H

#include <stddef.h>
#include <stdint.h>

#include "qkv/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QKV_MAX_TOKENS 48 /* longest sentence, in tokens */
#define QKV_LEVELS 3
#define QKV_ALL_LEVELS 7u /* the level bit set of levels 1, 2 and 3 */

typedef enum qkv_word_kind {
    QKV_WORD_PAD,    /* id 0, "<pad>": never produced by the tokenizer */
    QKV_WORD_MALE,   /* a boy's name */
    QKV_WORD_FEMALE, /* a girl's name */
    QKV_WORD_HE,     /* 他 */
    QKV_WORD_SHE,    /* 她 */
    QKV_WORD_OTHER
} qkv_word_kind;

/* The vocabulary. Ids run from 0 to qkv_vocab_size() - 1; id 0 is padding. */
int qkv_vocab_size(void);
const char *qkv_vocab_word(int id);      /* NULL for an id out of range */
qkv_word_kind qkv_vocab_kind(int id);    /* QKV_WORD_PAD for an id out of range */
int qkv_vocab_id(const char *word);      /* -1 if the word is not in the vocabulary */

/* CRC32 of the vocabulary (words and kinds, in id order). Checkpoints store
 * it so a model is never loaded against a different vocabulary. */
uint32_t qkv_vocab_fingerprint(void);

/* The classes are the names, in vocabulary order. */
int qkv_coref_classes(void);
int qkv_coref_class_of(int id);  /* a name's class, or -1 for other words */
int qkv_coref_name_id(int cls);  /* the name of a class, or -1 */

/* Checks that s[0..n) is valid UTF-8 (no overlong forms, surrogates or code
 * points above U+10FFFF). Returns 1 if valid; otherwise 0 and the byte
 * offset of the first bad sequence in *bad. */
int qkv_utf8_valid(const char *s, size_t n, size_t *bad);

/* Tokenizes NUL-terminated UTF-8 text by greedy longest match over the
 * vocabulary, skipping ASCII white space. Writes at most max ids and the
 * count to *n. Errors (message in err, which may be NULL):
 *   QKV_ERR_FORMAT  invalid UTF-8 ("invalid UTF-8 at byte 7"), or a word
 *                   not in the vocabulary, quoted with its character offset
 *                   ("unknown word \"排球\" at character 15");
 *   QKV_ERR_ARG     more than max tokens. */
qkv_status qkv_tokenize(const char *text, int *ids, int max, int *n, char *err, size_t errlen);

/* One sentence with one pronoun to resolve. */
typedef struct qkv_example {
    int len;                    /* number of tokens */
    int ids[QKV_MAX_TOKENS];    /* (len) token ids */
    int pronoun;                /* position of the pronoun */
    int antecedent;             /* token id of the name it refers to */
    int target;                 /* class of that name */
    int level;                  /* 1, 2 or 3 */
    int tmpl;                   /* template number within its level */
} qkv_example;

/* The generated data. Level 1: one person and one pronoun. Level 2: two
 * people of different gender; the pronoun's gender decides. Level 3: longer
 * sentences with distractor words, including cataphora (pronoun first).
 * train and val use the same templates with disjoint (template, names)
 * combinations; test uses templates that never appear in training. */
typedef struct qkv_dataset {
    qkv_example *train, *val, *test; /* owned; free with qkv_dataset_free */
    int n_train, n_val, n_test;
} qkv_dataset;

/* Builds the splits for the levels whose bits are set in levels (bit 0 =
 * level 1, ...), shuffled deterministically by seed. Returns QKV_ERR_ARG for
 * an empty level set, QKV_ERR_NOMEM when memory runs out (then *d is empty). */
qkv_status qkv_dataset_build(qkv_dataset *d, unsigned levels, uint64_t seed);

/* Frees the splits; accepts NULL and an empty dataset. */
void qkv_dataset_free(qkv_dataset *d);

/* Writes the example's text (its tokens concatenated) into buf. */
void qkv_example_text(const qkv_example *ex, char *buf, size_t len);

/* Parses a level list such as "1,2,3" or "2" into a bit set; 0 on error. */
unsigned qkv_parse_levels(const char *s);

#ifdef __cplusplus
}
#endif
#endif
