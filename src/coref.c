/*
 * coref.c - vocabulary, tokenizer, sentence templates and splits for the
 * coreference task.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "qkv/coref.h"
#include "qkv/kernels.h"
#include "qkv/rng.h"

/* ------------------------------------------------------------------------ */
/* vocabulary                                                               */

typedef struct word {
    const char *text;
    qkv_word_kind kind;
} word;

static const word vocab[] = {
    {"<pad>", QKV_WORD_PAD},
    {"小明", QKV_WORD_MALE}, {"小刚", QKV_WORD_MALE}, {"小强", QKV_WORD_MALE},
    {"小军", QKV_WORD_MALE}, {"大伟", QKV_WORD_MALE}, {"阿杰", QKV_WORD_MALE},
    {"小红", QKV_WORD_FEMALE}, {"小丽", QKV_WORD_FEMALE}, {"小芳", QKV_WORD_FEMALE},
    {"小美", QKV_WORD_FEMALE}, {"小雪", QKV_WORD_FEMALE}, {"阿珍", QKV_WORD_FEMALE},
    {"他", QKV_WORD_HE}, {"她", QKV_WORD_SHE},
    {"是", QKV_WORD_OTHER}, {"个", QKV_WORD_OTHER}, {"运动达人", QKV_WORD_OTHER},
    {"平时", QKV_WORD_OTHER}, {"很", QKV_WORD_OTHER}, {"爱", QKV_WORD_OTHER},
    {"打", QKV_WORD_OTHER}, {"篮球", QKV_WORD_OTHER}, {"和", QKV_WORD_OTHER},
    {"去", QKV_WORD_OTHER}, {"公园", QKV_WORD_OTHER}, {"喜欢", QKV_WORD_OTHER},
    {"唱歌", QKV_WORD_OTHER}, {"跳舞", QKV_WORD_OTHER}, {"跑步", QKV_WORD_OTHER},
    {"踢", QKV_WORD_OTHER}, {"足球", QKV_WORD_OTHER}, {"画画", QKV_WORD_OTHER},
    {"看书", QKV_WORD_OTHER}, {"老师", QKV_WORD_OTHER}, {"学生", QKV_WORD_OTHER},
    {"朋友", QKV_WORD_OTHER}, {"今天", QKV_WORD_OTHER}, {"说", QKV_WORD_OTHER},
    {"因为", QKV_WORD_OTHER}, {"所以", QKV_WORD_OTHER}, {"的", QKV_WORD_OTHER},
    {"，", QKV_WORD_OTHER}, {"。", QKV_WORD_OTHER},
    {"也", QKV_WORD_OTHER}, {"一起", QKV_WORD_OTHER}, {"昨天", QKV_WORD_OTHER},
    {"同学", QKV_WORD_OTHER}, {"！", QKV_WORD_OTHER},
};

#define VOCAB ((int)(sizeof vocab / sizeof vocab[0]))

int qkv_vocab_size(void)
{
    return VOCAB;
}

const char *qkv_vocab_word(int id)
{
    return id >= 0 && id < VOCAB ? vocab[id].text : NULL;
}

qkv_word_kind qkv_vocab_kind(int id)
{
    return id >= 0 && id < VOCAB ? vocab[id].kind : QKV_WORD_PAD;
}

int qkv_vocab_id(const char *w)
{
    for (int i = 1; i < VOCAB; i++)
        if (strcmp(vocab[i].text, w) == 0)
            return i;
    return -1;
}

uint32_t qkv_vocab_fingerprint(void)
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
    qkv_word_kind k = qkv_vocab_kind(id);
    return k == QKV_WORD_MALE || k == QKV_WORD_FEMALE;
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
/* UTF-8 and the tokenizer                                                  */

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned min, cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2, min = 0x80, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3, min = 0x800, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4, min = 0x10000, cp = c & 0x07;
    else
        return 0;
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

int qkv_utf8_valid(const char *s, size_t n, size_t *bad)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_seq(p + i, n - i);
        if (len == 0) {
            if (bad != NULL)
                *bad = i;
            return 0;
        }
        i += len;
    }
    return 1;
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

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (err == NULL || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

qkv_status qkv_tokenize(const char *text, int *ids, int max, int *n, char *err, size_t errlen)
{
    size_t total = strlen(text), bad;
    *n = 0;
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (!qkv_utf8_valid(text, total, &bad)) {
        set_err(err, errlen, "invalid UTF-8 at byte %zu", bad);
        return QKV_ERR_FORMAT;
    }
    for (size_t i = 0; i < total;) {
        if (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r') {
            i++;
            continue;
        }
        size_t len;
        int id = longest_match(text + i, &len);
        if (id < 0) {
            /* quote the run of characters up to the next known word or space */
            size_t end = i + utf8_seq((const unsigned char *)text + i, total - i);
            while (end < total && text[end] != ' ' && longest_match(text + end, &len) < 0)
                end += utf8_seq((const unsigned char *)text + end, total - end);
            char word[128];
            size_t wl = end - i < sizeof word - 1 ? end - i : sizeof word - 1;
            while (wl > 0 && ((unsigned char)text[i + wl] & 0xC0) == 0x80 && wl < end - i)
                wl--; /* never cut a character in half */
            memcpy(word, text + i, wl);
            word[wl] = '\0';
            set_err(err, errlen, "unknown word \"%s\" at character %zu", word, char_count(text, i));
            return QKV_ERR_FORMAT;
        }
        if (*n >= max) {
            set_err(err, errlen, "sentence too long: more than %d tokens", max);
            return QKV_ERR_ARG;
        }
        ids[(*n)++] = id;
        i += len;
    }
    return QKV_OK;
}

/* ------------------------------------------------------------------------ */
/* templates                                                                */

/* Tokens separated by spaces. A is the antecedent, B a person of the other
 * gender, P the pronoun that refers to A. */
typedef struct tmpl {
    int level;
    int test; /* 1: held out of training entirely */
    const char *text;
} tmpl;

static const tmpl templates[] = {
    {1, 0, "A 是 个 运动达人 ， P 平时 很 爱 打 篮球"},
    {1, 0, "A 很 爱 唱歌 ， P 今天 去 公园"},
    {1, 0, "A 是 个 学生 ， P 喜欢 看书 。"},
    {1, 0, "今天 A 去 公园 ， P 很 喜欢 跑步"},
    {1, 1, "A 是 个 老师 ， P 平时 爱 画画 。"},
    {1, 1, "昨天 A 说 P 很 爱 跳舞"},
    {2, 0, "A 和 B 是 朋友 ， P 很 爱 踢 足球"},
    {2, 0, "B 和 A 去 公园 ， P 喜欢 唱歌"},
    {2, 0, "A 是 B 的 老师 ， P 平时 很 爱 看书"},
    {2, 0, "B 是 个 学生 ， A 是 个 老师 ， P 喜欢 跳舞 。"},
    {2, 1, "B 说 A 是 个 运动达人 ， P 平时 爱 打 篮球"},
    {2, 1, "A 和 B 今天 一起 去 公园 ， P 说 很 爱 画画 ！"},
    {3, 0, "因为 P 喜欢 唱歌 ， 所以 A 和 B 去 公园"},
    {3, 0, "今天 A 和 B 一起 去 公园 跑步 ， 因为 P 平时 很 爱 跑步 ， 所以 A 是 个 运动达人"},
    {3, 0, "B 是 A 的 同学 ， 昨天 P 说 B 也 很 喜欢 踢 足球 。"},
    {3, 0, "因为 B 是 个 老师 ， 所以 P 平时 也 很 爱 看书 ， A 是 B 的 学生"},
    {3, 1, "因为 P 平时 很 爱 画画 ， 所以 B 说 A 是 个 学生"},
    {3, 1, "昨天 B 和 A 是 朋友 ， 今天 P 说 因为 很 爱 跳舞 所以 去 公园 唱歌 。"},
};

#define N_TEMPLATES ((int)(sizeof templates / sizeof templates[0]))

/* Fills ex from a template and the names a (antecedent) and b. Returns 0 if
 * the template does not parse (a programming error caught by the tests). */
static int instantiate(const tmpl *t, int tno, int a, int b, qkv_example *ex)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", t->text);
    memset(ex, 0, sizeof *ex);
    ex->level = t->level;
    ex->tmpl = tno;
    ex->antecedent = a;
    ex->target = qkv_coref_class_of(a);
    ex->pronoun = -1;
    char *save = NULL;
    for (char *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        int id;
        if (strcmp(tok, "A") == 0)
            id = a;
        else if (strcmp(tok, "B") == 0)
            id = b;
        else if (strcmp(tok, "P") == 0) {
            id = qkv_vocab_id(qkv_vocab_kind(a) == QKV_WORD_MALE ? "他" : "她");
            ex->pronoun = ex->len;
        } else
            id = qkv_vocab_id(tok);
        if (id < 0 || ex->len >= QKV_MAX_TOKENS)
            return 0;
        ex->ids[ex->len++] = id;
    }
    return ex->pronoun >= 0;
}

static int names_of(qkv_word_kind kind, int *out)
{
    int n = 0;
    for (int i = 0; i < VOCAB; i++)
        if (vocab[i].kind == kind)
            out[n++] = i;
    return n;
}

/* Appends every (template, A, B) instance of one template to out. */
static int expand(int tno, qkv_example *out)
{
    int male[VOCAB], female[VOCAB], n = 0;
    int nm = names_of(QKV_WORD_MALE, male), nf = names_of(QKV_WORD_FEMALE, female);
    const tmpl *t = &templates[tno];
    for (int g = 0; g < 2; g++) {
        const int *as = g ? female : male, *bs = g ? male : female;
        int na = g ? nf : nm, nb = t->level == 1 ? 1 : (g ? nm : nf);
        for (int i = 0; i < na; i++)
            for (int j = 0; j < nb; j++)
                n += instantiate(t, tno, as[i], bs[j], &out[n]);
    }
    return n;
}

/* Moves one training combination in five, chosen by a seeded shuffle, to
 * the validation split. */
static qkv_status split_validation(qkv_dataset *d, uint64_t seed)
{
    int n = d->n_train, n_val = n / 5;
    int *order = qkv_malloc(sizeof *order * (size_t)(n + 1));
    qkv_example *val = qkv_malloc(sizeof *val * (size_t)(n_val + 1));
    qkv_example *train = qkv_malloc(sizeof *train * (size_t)(n - n_val + 1));
    if (order == NULL || val == NULL || train == NULL) {
        free(order);
        free(val);
        free(train);
        qkv_dataset_free(d);
        return QKV_ERR_NOMEM;
    }
    for (int i = 0; i < n; i++)
        order[i] = i;
    qkv_rng g;
    qkv_rng_seed(&g, seed);
    qkv_rng_shuffle(&g, order, (size_t)n, sizeof *order);
    for (int i = 0; i < n; i++) {
        if (i < n_val)
            val[i] = d->train[order[i]];
        else
            train[i - n_val] = d->train[order[i]];
    }
    free(order);
    free(d->train);
    d->train = train;
    d->val = val;
    d->n_val = n_val;
    d->n_train = n - n_val;
    return QKV_OK;
}

qkv_status qkv_dataset_build(qkv_dataset *d, unsigned levels, uint64_t seed)
{
    int male[VOCAB], female[VOCAB];
    memset(d, 0, sizeof *d);
    if ((levels & 7u) == 0 || (levels & ~7u) != 0)
        return QKV_ERR_ARG;
    int nm = names_of(QKV_WORD_MALE, male), nf = names_of(QKV_WORD_FEMALE, female);
    size_t most = (size_t)(2 * nm * nf + nm + nf) * N_TEMPLATES; /* every combination */
    d->train = qkv_malloc(sizeof *d->train * most);
    d->test = qkv_malloc(sizeof *d->test * most);
    if (d->train == NULL || d->test == NULL) {
        qkv_dataset_free(d);
        return QKV_ERR_NOMEM;
    }
    for (int tno = 0; tno < N_TEMPLATES; tno++) {
        if (!(levels & (1u << (templates[tno].level - 1))))
            continue;
        if (templates[tno].test)
            d->n_test += expand(tno, d->test + d->n_test);
        else
            d->n_train += expand(tno, d->train + d->n_train);
    }
    return split_validation(d, seed);
}

void qkv_dataset_free(qkv_dataset *d)
{
    if (d == NULL)
        return;
    free(d->train);
    free(d->val);
    free(d->test);
    memset(d, 0, sizeof *d);
}

void qkv_example_text(const qkv_example *ex, char *buf, size_t len)
{
    size_t used = 0;
    if (len == 0)
        return;
    buf[0] = '\0';
    for (int i = 0; i < ex->len && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s", qkv_vocab_word(ex->ids[i]));
}

unsigned qkv_parse_levels(const char *s)
{
    unsigned bits = 0;
    for (const char *p = s; *p; p++) {
        if (*p >= '1' && *p <= '0' + QKV_LEVELS && (p[1] == ',' || p[1] == '\0'))
            bits |= 1u << (*p - '1');
        else if (*p != ',' || p == s || p[1] == '\0')
            return 0;
    }
    return bits;
}
