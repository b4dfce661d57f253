/*
 * fuzz_tokenizer.c - libFuzzer target: the coreference tokenizer (UTF-8
 * validation, longest match, unknown-word quoting) on arbitrary bytes, and
 * the message escaper and the UTF-8 decoder on the same bytes.
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
    /* the decoder agrees with the validator: it stops first where the
     * validator says the bytes go bad, and each character it decodes
     * encodes back (RFC 3629's table) to the bytes it read */
    size_t at = 0, bad = size, len;
    uint32_t cp;
    while ((len = qkv_utf8_next(text + at, size - at, &cp)) > 0) {
        unsigned char b[4];
        const size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
        static const unsigned char lead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
        for (size_t k = n - 1; k > 0; k--)
            b[k] = (unsigned char)(0x80 | (cp >> (6 * (n - 1 - k)) & 0x3F));
        b[0] = (unsigned char)(lead[n] | cp >> (6 * (n - 1)));
        if (len != n || memcmp(b, text + at, n) != 0)
            abort();
        at += len;
    }
    if (qkv_utf8_valid(text, size, &bad) != (at == size) || (at < size && bad != at))
        abort();
    free(text);
    return 0;
}
