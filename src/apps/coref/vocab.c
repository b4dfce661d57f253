/*
 * vocab.c - the coreference task's vocabulary and tokenizer.
 */
#include <stdio.h>
#include <string.h>

#include "apps/coref/vocab.h"

/* ------------------------------------------------------------------------ */
/* vocabulary                                                               */

typedef struct word {
    const char *text;
    qkv_coref_word_kind kind;
} word;

static const word vocab[] = {
    {"<pad>", QKV_COREF_PAD},   {"小明", QKV_COREF_MALE},   {"小刚", QKV_COREF_MALE},
    {"小强", QKV_COREF_MALE},   {"小军", QKV_COREF_MALE},   {"大伟", QKV_COREF_MALE},
    {"阿杰", QKV_COREF_MALE},   {"小红", QKV_COREF_FEMALE}, {"小丽", QKV_COREF_FEMALE},
    {"小芳", QKV_COREF_FEMALE}, {"小美", QKV_COREF_FEMALE}, {"小雪", QKV_COREF_FEMALE},
    {"阿珍", QKV_COREF_FEMALE}, {"他", QKV_COREF_HE},       {"她", QKV_COREF_SHE},
    {"是", QKV_COREF_OTHER},    {"个", QKV_COREF_OTHER},    {"运动达人", QKV_COREF_OTHER},
    {"平时", QKV_COREF_OTHER},  {"很", QKV_COREF_OTHER},    {"爱", QKV_COREF_OTHER},
    {"打", QKV_COREF_OTHER},    {"篮球", QKV_COREF_OTHER},  {"和", QKV_COREF_OTHER},
    {"去", QKV_COREF_OTHER},    {"公园", QKV_COREF_OTHER},  {"喜欢", QKV_COREF_OTHER},
    {"唱歌", QKV_COREF_OTHER},  {"跳舞", QKV_COREF_OTHER},  {"跑步", QKV_COREF_OTHER},
    {"踢", QKV_COREF_OTHER},    {"足球", QKV_COREF_OTHER},  {"画画", QKV_COREF_OTHER},
    {"看书", QKV_COREF_OTHER},  {"老师", QKV_COREF_OTHER},  {"学生", QKV_COREF_OTHER},
    {"朋友", QKV_COREF_OTHER},  {"今天", QKV_COREF_OTHER},  {"说", QKV_COREF_OTHER},
    {"因为", QKV_COREF_OTHER},  {"所以", QKV_COREF_OTHER},  {"的", QKV_COREF_OTHER},
    {"，", QKV_COREF_OTHER},    {"。", QKV_COREF_OTHER},    {"也", QKV_COREF_OTHER},
    {"一起", QKV_COREF_OTHER},  {"昨天", QKV_COREF_OTHER},  {"同学", QKV_COREF_OTHER},
    {"！", QKV_COREF_OTHER},
};

#define VOCAB ((int)(sizeof vocab / sizeof vocab[0]))

int qkv_coref_vocab_size(void)
{
    return VOCAB;
}

const char *qkv_coref_word(int id)
{
    return id >= 0 && id < VOCAB ? vocab[id].text : NULL;
}

qkv_coref_word_kind qkv_coref_kind(int id)
{
    return id >= 0 && id < VOCAB ? vocab[id].kind : QKV_COREF_PAD;
}

int qkv_coref_word_id(const char *w)
{
    for (int i = 1; i < VOCAB; i++)
        if (strcmp(vocab[i].text, w) == 0)
            return i;
    return -1;
}

uint32_t qkv_coref_fingerprint(void)
{
    uint32_t crc = 0;
    for (int i = 0; i < VOCAB; i++) {
        unsigned char kind = (unsigned char)vocab[i].kind;
        crc = qkv_crc32(crc, vocab[i].text, strlen(vocab[i].text) + 1);
        crc = qkv_crc32(crc, &kind, 1);
    }
    return crc;
}

static int is_name(int id)
{
    qkv_coref_word_kind k = qkv_coref_kind(id);
    return k == QKV_COREF_MALE || k == QKV_COREF_FEMALE;
}

int qkv_coref_classes(void)
{
    int n = 0;
    for (int i = 0; i < VOCAB; i++)
        n += is_name(i);
    return n;
}

int qkv_coref_class_of(int id)
{
    if (!is_name(id))
        return -1;
    int cls = 0;
    for (int i = 0; i < id; i++)
        cls += is_name(i);
    return cls;
}

int qkv_coref_name_id(int cls)
{
    for (int i = 0; i < VOCAB; i++)
        if (is_name(i) && cls-- == 0)
            return i;
    return -1;
}

/* ------------------------------------------------------------------------ */
/* the tokenizer                                                            */

/* Bytes in the UTF-8 sequence that starts with lead byte c (the text has
 * been validated). */
static size_t char_len(unsigned char c)
{
    return c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

/* The bytes of the space that s starts with, or 0: ASCII white space (as
 * isspace has it in the C locale: space, \t, \n, \v, \f, \r), or the
 * ideographic (full-width) space U+3000, which a Chinese input method
 * types: 3 bytes. */
static size_t space_len(const char *s)
{
    if (*s != '\0' && strchr(" \t\n\v\f\r", *s) != NULL)
        return 1;
    return strncmp(s, "\u3000", 3) == 0 ? 3 : 0;
}

/* The longest vocabulary word that starts at s, or -1. */
static int longest_match(const char *s, size_t *len)
{
    int best = -1;
    size_t best_len = 0;
    for (int i = 1; i < VOCAB; i++) {
        size_t l = strlen(vocab[i].text);
        if (l > best_len && strncmp(s, vocab[i].text, l) == 0) {
            best = i;
            best_len = l;
        }
    }
    *len = best_len;
    return best;
}

static size_t char_count(const char *s, size_t bytes)
{
    size_t n = 0;
    for (size_t i = 0; i < bytes; i++)
        n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

qkv_status qkv_coref_tokenize(const char *text, int *ids, int max, int *n, qkv_error *err)
{
    if (text == NULL || ids == NULL || n == NULL)
        return qkv_error_set(err, QKV_ERR_ARG, "tokenize: no text, ids or count");
    size_t total = strlen(text), bad;
    *n = 0;
    if (!qkv_utf8_valid(text, total, &bad)) {
        qkv_error_set(err, QKV_ERR_FORMAT, "invalid UTF-8 at byte %zu", bad);
        return QKV_ERR_FORMAT;
    }
    for (size_t i = 0; i < total;) {
        const size_t space = space_len(text + i);
        if (space > 0) {
            i += space;
            continue;
        }
        size_t len;
        int id = longest_match(text + i, &len);
        if (id < 0) {
            /* quote the run of characters up to the next known word or space */
            size_t end = i + char_len((unsigned char)text[i]);
            while (end < total && space_len(text + end) == 0 && longest_match(text + end, &len) < 0)
                end += char_len((unsigned char)text[end]);
            /* whole characters, as many as fit; a quote or backslash in
             * the word is escaped, so that the quotes around it still
             * delimit it: "\"" for a lone quote */
            char word[128];
            size_t wn = 0;
            for (size_t k = i; k < end;) {
                const size_t cl = char_len((unsigned char)text[k]);
                const int esc = text[k] == '"' || text[k] == '\\';
                if (k + cl > end || wn + cl + (size_t)esc >= sizeof word)
                    break;
                if (esc)
                    word[wn++] = '\\';
                memcpy(word + wn, text + k, cl);
                wn += cl;
                k += cl;
            }
            word[wn] = '\0';
            /* ASCII punctuation, as an English keyboard types it: name the
             * vocabulary's full-width mark */
            const char *wide = strcmp(word, ",") == 0   ? "，"
                               : strcmp(word, ".") == 0 ? "。"
                               : strcmp(word, "!") == 0 ? "！"
                                                        : NULL;
            if (wide != NULL)
                qkv_error_set(err, QKV_ERR_FORMAT,
                              "unknown word \"%s\" at character %zu (write the full-width \"%s\")",
                              word, char_count(text, i), wide);
            else
                qkv_error_set(err, QKV_ERR_FORMAT, "unknown word \"%s\" at character %zu", word,
                              char_count(text, i));
            return QKV_ERR_FORMAT;
        }
        if (*n >= max) {
            qkv_error_set(err, QKV_ERR_ARG, "sentence too long: more than %d tokens", max);
            return QKV_ERR_ARG;
        }
        ids[(*n)++] = id;
        i += len;
    }
    return QKV_OK;
}
