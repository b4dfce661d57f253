/*
 * fuzz_tokenizer.c - libFuzzer target: the coreference tokenizer (UTF-8
 * validation, longest match, unknown-word quoting) on arbitrary bytes, and
 * the message escaper on the same bytes.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "apps/coref.h"
#include "util/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0'; /* the tokenizer takes C strings */
    int ids[QKV_COREF_MAX_TOKENS], n = -1;
    qkv_error err = qkv_error_none();
    qkv_status s = qkv_coref_tokenize(text, ids, QKV_COREF_MAX_TOKENS, &n, &err);
    if (s == QKV_OK) {
        if (n < 0 || n > QKV_COREF_MAX_TOKENS)
            abort();
        for (int i = 0; i < n; i++)
            if (ids[i] < 1 || ids[i] >= qkv_coref_vocab_size())
                abort();
    } else if (err.status != s || err.message[0] == '\0') {
        abort();
    }
    for (const char *p = err.message; *p; p++) /* messages carry no control characters */
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            abort();
    char safe[64];
    qkv_escape(safe, sizeof safe, text);
    if (!qkv_utf8_valid(safe, strlen(safe), NULL))
        abort();
    free(text);
    return 0;
}
