/*
 * vocab.h - the coreference task's fixed vocabulary (names with gender,
 * pronouns, other words) and a greedy longest-match tokenizer over UTF-8.
 */
#ifndef QKV_COREF_VOCAB_H
#define QKV_COREF_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "qkv/base.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QKV_COREF_MAX_TOKENS 48 /* longest sentence, in tokens */

typedef enum qkv_coref_word_kind {
    QKV_COREF_PAD,    /* id 0, "<pad>": never produced by the tokenizer */
    QKV_COREF_MALE,   /* a boy's name */
    QKV_COREF_FEMALE, /* a girl's name */
    QKV_COREF_HE,     /* 他 */
    QKV_COREF_SHE,    /* 她 */
    QKV_COREF_OTHER
} qkv_coref_word_kind;

/* The vocabulary. Ids run from 0 to qkv_coref_vocab_size() - 1; id 0 is
 * padding. */
int qkv_coref_vocab_size(void);
const char *qkv_coref_word(int id);         /* NULL for an id out of range */
qkv_coref_word_kind qkv_coref_kind(int id); /* QKV_COREF_PAD for an id out of range */
int qkv_coref_word_id(const char *word);    /* -1 if the word is not in the vocabulary */

/* CRC-32 of the vocabulary (words and kinds, in id order). Checkpoints
 * store it so a model is never loaded against a different vocabulary. */
uint32_t qkv_coref_fingerprint(void);

/* The classes are the names, in vocabulary order. */
int qkv_coref_classes(void);
int qkv_coref_class_of(int id); /* a name's class, or -1 for other words */
int qkv_coref_name_id(int cls); /* the name of a class, or -1 */

/* Tokenizes NUL-terminated UTF-8 text by greedy longest match over the
 * vocabulary, skipping ASCII white space and the ideographic space U+3000.
 * Writes at most max ids and the count to *n. Errors, with the message in err:
 *   QKV_ERR_FORMAT  invalid UTF-8 ("invalid UTF-8 at byte 7"), or a word
 *                   not in the vocabulary, quoted with its character offset
 *                   ("unknown word \"排球\" at character 15"; an ASCII
 *                   ',', '.' or '!' adds "(write the full-width \"，\")");
 *   QKV_ERR_ARG     more than max tokens. */
qkv_status qkv_coref_tokenize(const char *text, int *ids, int max, int *n, qkv_error *err);

#ifdef __cplusplus
}
#endif
#endif
