/*
 * fuzz_json.c - libFuzzer target: the strict JSON parser on arbitrary
 * bytes, with a token limit of one per 3 bytes as the safetensors reader
 * sets it. Every token of an accepted text must lie inside it and nest
 * properly, and every accessor must work on it.
 */
#include <stdlib.h>

#include "util/json.h"
#include "util/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    qkv_json j;
    qkv_error err = qkv_error_none();
    if (qkv_json_parse(&j, (const char *)data, size, (int)(size / 3 + 16), &err) != QKV_OK) {
        if (err.status == QKV_OK || j.n != 0)
            abort();
        return 0;
    }
    char buf[64];
    for (int i = 0; i < j.n; i++) {
        const qkv_json_tok *t = &j.tok[i];
        if (t->start > t->end || t->end > size || t->next <= i || t->next > j.n)
            abort();
        if (t->kind == QKV_JSON_STRING) {
            long n = qkv_json_string(&j, i, buf, sizeof buf);
            if (n >= (long)sizeof buf)
                abort();
            (void)qkv_json_string_is(&j, i, "dtype");
        } else if (t->kind == QKV_JSON_NUMBER) {
            uint64_t v;
            (void)qkv_json_uint(&j, i, &v);
        }
    }
    qkv_json_free(&j);
    return 0;
}
