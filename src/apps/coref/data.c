/*
 * data.c - the coreference task's sentence templates, the generator and
 * the train / validation / test splits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/coref/data.h"
#include "qkv/rng.h"
#include "util/util.h"

#define MAX_NAMES 64 /* of one gender; the vocabulary has far fewer */

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
static int instantiate(const tmpl *t, int tno, int a, int b, qkv_coref_example *ex)
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
            id = qkv_coref_word_id(qkv_coref_kind(a) == QKV_COREF_MALE ? "他" : "她");
            ex->pronoun = ex->len;
        } else
            id = qkv_coref_word_id(tok);
        if (id < 0 || ex->len >= QKV_COREF_MAX_TOKENS)
            return 0;
        ex->ids[ex->len++] = id;
    }
    return ex->pronoun >= 0;
}

static int names_of(qkv_coref_word_kind kind, int *out)
{
    int n = 0;
    for (int i = 0; i < qkv_coref_vocab_size(); i++)
        if (qkv_coref_kind(i) == kind)
            out[n++] = i;
    return n;
}

/* Appends every (template, A, B) instance of one template to out. */
static int expand(int tno, qkv_coref_example *out)
{
    int male[MAX_NAMES], female[MAX_NAMES], n = 0;
    int nm = names_of(QKV_COREF_MALE, male), nf = names_of(QKV_COREF_FEMALE, female);
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
static qkv_status split_validation(qkv_coref_data *d, uint64_t seed)
{
    int n = d->n_train, n_val = n / 5;
    int *order = qkv_malloc(sizeof *order * (size_t)(n + 1));
    qkv_coref_example *val = qkv_malloc(sizeof *val * (size_t)(n_val + 1));
    qkv_coref_example *train = qkv_malloc(sizeof *train * (size_t)(n - n_val + 1));
    if (order == NULL || val == NULL || train == NULL) {
        free(order);
        free(val);
        free(train);
        qkv_coref_data_free(d);
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

qkv_status qkv_coref_data_build(qkv_coref_data *d, unsigned levels, uint64_t seed, qkv_error *err)
{
    int male[MAX_NAMES], female[MAX_NAMES];
    if (d == NULL)
        return qkv_error_set(err, QKV_ERR_ARG, "data: nowhere to build it (NULL)");
    memset(d, 0, sizeof *d);
    if ((levels & QKV_COREF_ALL_LEVELS) == 0 || (levels & ~QKV_COREF_ALL_LEVELS) != 0)
        return qkv_error_set(err, QKV_ERR_ARG, "data: level set %#x is not a set of 1, 2, 3",
                             levels);
    int nm = names_of(QKV_COREF_MALE, male), nf = names_of(QKV_COREF_FEMALE, female);
    size_t most = (size_t)(2 * nm * nf + nm + nf) * N_TEMPLATES; /* every combination */
    d->train = qkv_malloc(sizeof *d->train * most);
    d->test = qkv_malloc(sizeof *d->test * most);
    if (d->train == NULL || d->test == NULL) {
        qkv_coref_data_free(d);
        return qkv_error_set(err, QKV_ERR_NOMEM, "data: out of memory");
    }
    for (int tno = 0; tno < N_TEMPLATES; tno++) {
        if (!(levels & (1u << (templates[tno].level - 1))))
            continue;
        if (templates[tno].test)
            d->n_test += expand(tno, d->test + d->n_test);
        else
            d->n_train += expand(tno, d->train + d->n_train);
    }
    if (split_validation(d, seed) != QKV_OK)
        return qkv_error_set(err, QKV_ERR_NOMEM, "data: out of memory");
    return QKV_OK;
}

void qkv_coref_data_free(qkv_coref_data *d)
{
    if (d == NULL)
        return;
    free(d->train);
    free(d->val);
    free(d->test);
    memset(d, 0, sizeof *d);
}

void qkv_coref_example_text(const qkv_coref_example *ex, char *buf, size_t len)
{
    size_t used = 0;
    if (len == 0)
        return;
    buf[0] = '\0';
    for (int i = 0; i < ex->len && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s", qkv_coref_word(ex->ids[i]));
}

unsigned qkv_coref_parse_levels(const char *s)
{
    unsigned bits = 0;
    for (const char *p = s; p != NULL; p += 2) {
        /* one digit from 1 to QKV_COREF_LEVELS, then a comma and the next
         * level, or the end; a level given twice is an error too */
        if (p[0] < '1' || p[0] > '0' + QKV_COREF_LEVELS || (bits & (1u << (p[0] - '1'))))
            return 0;
        bits |= 1u << (p[0] - '1');
        if (p[1] == '\0')
            return bits;
        if (p[1] != ',')
            return 0;
    }
    return 0;
}
