/*
 * json.h - a strict JSON parser (RFC 8259), private to the library, for
 * reading safetensors headers: the whole text must be one value (trailing
 * spaces allowed), strings must be valid UTF-8 with valid escapes (a \u
 * surrogate pair or nothing), numbers follow the grammar exactly, objects
 * may not repeat a key, and nesting is limited. The result is a flat array
 * of tokens in document order; each knows where its subtree ends, so
 * walking an object's members is a loop.
 */
#ifndef QKV_JSON_H
#define QKV_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "qkv/base.h"

typedef enum qkv_json_kind {
    QKV_JSON_OBJECT,
    QKV_JSON_ARRAY,
    QKV_JSON_STRING,
    QKV_JSON_NUMBER,
    QKV_JSON_TRUE,
    QKV_JSON_FALSE,
    QKV_JSON_NULL
} qkv_json_kind;

typedef struct qkv_json_tok {
    qkv_json_kind kind;
    size_t start, end; /* the token's bytes in the text ([start, end); a string's
                        * without its quotes) */
    int size;          /* an object's member count, an array's element count */
    int next;          /* the index just after this token's subtree */
} qkv_json_tok;

typedef struct qkv_json {
    qkv_json_tok *tok; /* (n) owned */
    int n;
    const char *text; /* not owned */
} qkv_json;

/* The deepest nesting accepted: safetensors headers need three levels. */
#define QKV_JSON_MAX_DEPTH 16

/* Parses text[0..len) into j, into at most max_tokens values (0: no
 * limit). QKV_ERR_FORMAT with the byte offset and the reason in err for
 * anything that is not strict JSON or has too many values, QKV_ERR_NOMEM
 * when memory runs out; j is then empty. */
qkv_status qkv_json_parse(qkv_json *j, const char *text, size_t len, int max_tokens,
                          qkv_error *err);

/* Frees the tokens; accepts an empty or zeroed j. */
void qkv_json_free(qkv_json *j);

/* Decodes string token i (escapes resolved) into buf, NUL-terminated;
 * returns its length, or -1 if it does not fit in cap - 1 bytes or
 * contains a NUL. */
long qkv_json_string(const qkv_json *j, int i, char *buf, size_t cap);

/* Nonzero when string token i equals s after decoding. */
int qkv_json_string_is(const qkv_json *j, int i, const char *s);

/* Number token i as a non-negative integer (digits only: no sign,
 * fraction or exponent) of at most 2^53; 0 and *v, or -1. */
int qkv_json_uint(const qkv_json *j, int i, uint64_t *v);

#endif
