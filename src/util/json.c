/*
 * json.c - the strict JSON parser of json.h: recursive descent over the
 * text, appending a token per value, with a depth limit, and a duplicate-key
 * check per object on the decoded keys.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/json.h"
#include "util/util.h"

typedef struct parser {
    const char *s;
    size_t len, pos;
    qkv_json *j;
    int cap, max;
    qkv_error *err;
    qkv_status status;
} parser;

static int fail(parser *p, const char *why)
{
    if (p->status == QKV_OK)
        p->status = qkv_error_set(p->err, QKV_ERR_FORMAT, "JSON: %s at byte %zu", why, p->pos);
    return -1;
}

static void skip_space(parser *p)
{
    while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
                               p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
        p->pos++;
}

/* Appends a token; its index, or -1. */
static int push(parser *p, qkv_json_kind kind, size_t start)
{
    qkv_json *j = p->j;
    if (p->max > 0 && j->n >= p->max) {
        fail(p, "too many values for the text's size");
        return -1;
    }
    if (j->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 64;
        if (p->max > 0 && cap > p->max) /* never room for more than the limit */
            cap = p->max;
        qkv_json_tok *t = cap > 0 ? qkv_realloc(j->tok, sizeof *t * (size_t)cap) : NULL;
        if (t == NULL) {
            if (p->status == QKV_OK)
                p->status = qkv_error_set(p->err, QKV_ERR_NOMEM, "JSON: out of memory");
            return -1;
        }
        j->tok = t;
        p->cap = cap;
    }
    qkv_json_tok *t = &j->tok[j->n];
    t->kind = kind;
    t->start = t->end = start;
    t->size = 0;
    t->next = j->n + 1;
    return j->n++;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* The four hex digits at s (which has at least 4 bytes), or -1. */
static long hex4(const char *s)
{
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(s[i]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    return v;
}

/* Validates the escape at s[i] == '\\'; returns its length, or 0. */
static size_t escape_len(const char *s, size_t i, size_t end)
{
    if (i + 1 >= end)
        return 0;
    switch (s[i + 1]) {
    case '"':
    case '\\':
    case '/':
    case 'b':
    case 'f':
    case 'n':
    case 'r':
    case 't': return 2;
    case 'u': break;
    default: return 0;
    }
    if (i + 6 > end)
        return 0;
    long u = hex4(s + i + 2);
    if (u < 0 || (u >= 0xDC00 && u <= 0xDFFF))
        return 0; /* not hex, or a low surrogate alone */
    if (u < 0xD800 || u > 0xDBFF)
        return 6;
    /* a high surrogate: a low one must follow */
    if (i + 12 > end || s[i + 6] != '\\' || s[i + 7] != 'u')
        return 0;
    long lo = hex4(s + i + 8);
    return lo >= 0xDC00 && lo <= 0xDFFF ? 12 : 0;
}

static int parse_string(parser *p)
{
    size_t i = ++p->pos; /* past the opening quote */
    int t = push(p, QKV_JSON_STRING, i);
    if (t < 0)
        return -1;
    while (i < p->len && p->s[i] != '"') {
        unsigned char c = (unsigned char)p->s[i];
        if (c < 0x20) {
            p->pos = i;
            return fail(p, "a control character in a string");
        }
        if (c == '\\') {
            size_t n = escape_len(p->s, i, p->len);
            if (n == 0) {
                p->pos = i;
                return fail(p, "a bad escape in a string");
            }
            i += n;
            continue;
        }
        size_t run = i; /* a run of plain bytes: valid UTF-8? */
        while (i < p->len && p->s[i] != '"' && p->s[i] != '\\' && (unsigned char)p->s[i] >= 0x20)
            i++;
        size_t bad;
        if (!qkv_utf8_valid(p->s + run, i - run, &bad)) {
            p->pos = run + bad;
            return fail(p, "invalid UTF-8 in a string");
        }
    }
    if (i >= p->len) {
        p->pos = i;
        return fail(p, "an unterminated string");
    }
    p->j->tok[t].end = i;
    p->pos = i + 1;
    return t;
}

static int digits(parser *p)
{
    size_t start = p->pos;
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
        p->pos++;
    return p->pos > start;
}

static int parse_number(parser *p)
{
    size_t start = p->pos;
    if (p->s[p->pos] == '-')
        p->pos++;
    if (p->pos < p->len && p->s[p->pos] == '0')
        p->pos++;
    else if (!digits(p))
        return fail(p, "a malformed number");
    if (p->pos < p->len && p->s[p->pos] == '.') {
        p->pos++;
        if (!digits(p))
            return fail(p, "a malformed number");
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        p->pos++;
        if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
            p->pos++;
        if (!digits(p))
            return fail(p, "a malformed number");
    }
    int t = push(p, QKV_JSON_NUMBER, start);
    if (t >= 0)
        p->j->tok[t].end = p->pos;
    return t;
}

static int parse_literal(parser *p, const char *word, qkv_json_kind kind)
{
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
        return fail(p, "an unexpected character");
    int t = push(p, kind, p->pos);
    p->pos += n;
    if (t >= 0)
        p->j->tok[t].end = p->pos;
    return t;
}

/* Orders decoded keys for the duplicate check: by name, then by place
 * (the keys point into one buffer in the object's order), so a repeated
 * key's places come out in order. */
static int cmp_keys(const void *a, const void *b)
{
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    const int c = strcmp(x, y);
    return c != 0 ? c : (x > y) - (x < y);
}

/* Fails if object token o (parsed) repeats a key. */
static int check_duplicates(parser *p, int o)
{
    qkv_json *j = p->j;
    int n = j->tok[o].size;
    if (n < 2)
        return 0;
    size_t bytes = 0;
    for (int k = o + 1, m = 0; m < n; m++, k = j->tok[k + 1].next)
        bytes += j->tok[k].end - j->tok[k].start + 1;
    char **keys = qkv_malloc(sizeof *keys * (size_t)n);
    char *buf = qkv_malloc(bytes);
    int r = 0;
    if (keys == NULL || buf == NULL) {
        p->status = qkv_error_set(p->err, QKV_ERR_NOMEM, "JSON: out of memory");
        r = -1;
    }
    char *at = buf;
    for (int k = o + 1, m = 0; r == 0 && m < n; m++, k = j->tok[k + 1].next) {
        size_t cap = j->tok[k].end - j->tok[k].start + 1;
        keys[m] = at;
        if (qkv_json_string(j, k, at, cap) < 0) { /* a NUL inside the key */
            p->pos = j->tok[k].start;
            r = fail(p, "a key with a NUL character");
        }
        at += cap;
    }
    if (r == 0) {
        qsort(keys, (size_t)n, sizeof *keys, cmp_keys);
        /* the first repetition in the text: the earliest second place of
         * any key (buf holds the keys in the object's order) */
        const char *later = NULL;
        for (int m = 1; m < n; m++)
            if (strcmp(keys[m - 1], keys[m]) == 0 && (later == NULL || keys[m] < later))
                later = keys[m];
        if (later != NULL) {
            const char *key = buf;
            for (int k = o + 1, i = 0; i < n; i++, k = j->tok[k + 1].next) {
                if (key == later)
                    p->pos = j->tok[k].start;
                key += j->tok[k].end - j->tok[k].start + 1;
            }
            char why[96];
            snprintf(why, sizeof why, "an object repeats the key \"%.48s\"", later);
            r = fail(p, why);
        }
    }
    free(keys);
    free(buf);
    return r;
}

static int parse_value(parser *p, int depth);

static int parse_container(parser *p, int depth, int object)
{
    if (depth >= QKV_JSON_MAX_DEPTH)
        return fail(p, "nesting too deep");
    int t = push(p, object ? QKV_JSON_OBJECT : QKV_JSON_ARRAY, p->pos);
    if (t < 0)
        return -1;
    const char close = object ? '}' : ']';
    p->pos++;
    skip_space(p);
    if (p->pos < p->len && p->s[p->pos] == close) {
        p->pos++;
    } else {
        for (;;) {
            skip_space(p);
            if (object) {
                if (p->pos >= p->len || p->s[p->pos] != '"')
                    return fail(p, "a key must be a string");
                if (parse_string(p) < 0)
                    return -1;
                skip_space(p);
                if (p->pos >= p->len || p->s[p->pos] != ':')
                    return fail(p, "a ':' was expected");
                p->pos++;
            }
            if (parse_value(p, depth + 1) < 0)
                return -1;
            p->j->tok[t].size++;
            skip_space(p);
            if (p->pos < p->len && p->s[p->pos] == ',') {
                p->pos++;
                continue;
            }
            if (p->pos < p->len && p->s[p->pos] == close) {
                p->pos++;
                break;
            }
            return fail(p, object ? "a ',' or '}' was expected" : "a ',' or ']' was expected");
        }
    }
    p->j->tok[t].end = p->pos;
    p->j->tok[t].next = p->j->n;
    if (object && check_duplicates(p, t) < 0)
        return -1;
    return t;
}

static int parse_value(parser *p, int depth)
{
    skip_space(p);
    if (p->pos >= p->len)
        return fail(p, "a value was expected");
    switch (p->s[p->pos]) {
    case '{': return parse_container(p, depth, 1);
    case '[': return parse_container(p, depth, 0);
    case '"': return parse_string(p);
    case 't': return parse_literal(p, "true", QKV_JSON_TRUE);
    case 'f': return parse_literal(p, "false", QKV_JSON_FALSE);
    case 'n': return parse_literal(p, "null", QKV_JSON_NULL);
    default:
        if (p->s[p->pos] == '-' || (p->s[p->pos] >= '0' && p->s[p->pos] <= '9'))
            return parse_number(p);
        return fail(p, "an unexpected character");
    }
}

qkv_status qkv_json_parse(qkv_json *j, const char *text, size_t len, int max_tokens, qkv_error *err)
{
    parser p = {text, len, 0, j, 0, max_tokens, err, QKV_OK};
    memset(j, 0, sizeof *j);
    j->text = text;
    if (text == NULL)
        return qkv_error_set(err, QKV_ERR_FORMAT, "JSON: no text");
    if (parse_value(&p, 0) >= 0) {
        skip_space(&p);
        if (p.pos != len)
            fail(&p, "text after the value");
    }
    if (p.status != QKV_OK) {
        qkv_json_free(j);
        j->text = text;
    }
    return p.status;
}

void qkv_json_free(qkv_json *j)
{
    if (j == NULL)
        return;
    free(j->tok);
    j->tok = NULL;
    j->n = 0;
}

/* Appends code point u to buf as UTF-8; the new length. */
static size_t put_utf8(char *buf, size_t n, unsigned long u)
{
    if (u < 0x80) {
        buf[n++] = (char)u;
    } else if (u < 0x800) {
        buf[n++] = (char)(0xC0 | (u >> 6));
        buf[n++] = (char)(0x80 | (u & 0x3F));
    } else if (u < 0x10000) {
        buf[n++] = (char)(0xE0 | (u >> 12));
        buf[n++] = (char)(0x80 | ((u >> 6) & 0x3F));
        buf[n++] = (char)(0x80 | (u & 0x3F));
    } else {
        buf[n++] = (char)(0xF0 | (u >> 18));
        buf[n++] = (char)(0x80 | ((u >> 12) & 0x3F));
        buf[n++] = (char)(0x80 | ((u >> 6) & 0x3F));
        buf[n++] = (char)(0x80 | (u & 0x3F));
    }
    return n;
}

long qkv_json_string(const qkv_json *j, int i, char *buf, size_t cap)
{
    if (j == NULL || i < 0 || i >= j->n || j->tok[i].kind != QKV_JSON_STRING || cap == 0)
        return -1;
    const char *s = j->text;
    size_t n = 0;
    for (size_t k = j->tok[i].start; k < j->tok[i].end;) {
        char ch[4];
        size_t len = 1;
        if (s[k] != '\\') {
            ch[0] = s[k++];
        } else {
            char e = s[k + 1];
            k += 2;
            switch (e) {
            case 'b': ch[0] = '\b'; break;
            case 'f': ch[0] = '\f'; break;
            case 'n': ch[0] = '\n'; break;
            case 'r': ch[0] = '\r'; break;
            case 't': ch[0] = '\t'; break;
            case 'u': {
                unsigned long u = (unsigned long)hex4(s + k);
                k += 4;
                if (u >= 0xD800 && u <= 0xDBFF) { /* validated: a low surrogate follows */
                    unsigned long lo = (unsigned long)hex4(s + k + 2);
                    u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
                    k += 6;
                }
                len = put_utf8(ch, 0, u);
                break;
            }
            default: ch[0] = e; break; /* " \ / */
            }
        }
        if (ch[0] == '\0' || n + len >= cap)
            return -1;
        memcpy(buf + n, ch, len);
        n += len;
    }
    buf[n] = '\0';
    return (long)n;
}

int qkv_json_string_is(const qkv_json *j, int i, const char *s)
{
    char buf[256];
    long n = qkv_json_string(j, i, buf, sizeof buf);
    return n >= 0 && strcmp(buf, s) == 0;
}

int qkv_json_uint(const qkv_json *j, int i, uint64_t *v)
{
    if (j == NULL || i < 0 || i >= j->n || j->tok[i].kind != QKV_JSON_NUMBER)
        return -1;
    uint64_t x = 0;
    for (size_t k = j->tok[i].start; k < j->tok[i].end; k++) {
        char c = j->text[k];
        if (c < '0' || c > '9' || x > ((uint64_t)1 << 53) / 10)
            return -1;
        x = x * 10 + (uint64_t)(c - '0');
    }
    if (x > ((uint64_t)1 << 53))
        return -1;
    *v = x;
    return 0;
}
