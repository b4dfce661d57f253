/*
 * st_mutate.h - the custom mutator the safetensors fuzz targets share.
 *
 * Random bytes rarely make a header length that ends exactly at the JSON
 * object's closing brace, or a CRC-32 that matches the data, so after the
 * usual mutation half of the outputs are re-framed: the length is set to
 * end at the brace that closes the top-level object, and a "qkv_crc32"
 * value in the header is rewritten to the data's CRC. The fuzzer then gets
 * past the framing into the parser, the tiling and the loader behind it.
 */
#ifndef QKV_ST_MUTATE_H
#define QKV_ST_MUTATE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "util/util.h"

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

/* The index of the brace that closes the object opening at data[8], or 0. */
static size_t st_object_end(const uint8_t *data, size_t size)
{
    int depth = 0, in_string = 0;
    for (size_t i = 8; i < size; i++) {
        const uint8_t c = data[i];
        if (in_string) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_string = 0;
        } else if (c == '"') {
            in_string = 1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if ((c == '}' || c == ']') && --depth == 0) {
            return i;
        }
    }
    return 0;
}

static void st_reframe(uint8_t *data, size_t size)
{
    const size_t end = size > 9 && data[8] == '{' ? st_object_end(data, size) : 0;
    if (end == 0)
        return;
    const uint64_t h = end - 8 + 1;
    for (int k = 0; k < 8; k++)
        data[k] = (uint8_t)(h >> (8 * k));
    static const char key[] = "\"qkv_crc32\":\"";
    const size_t kl = sizeof key - 1;
    for (size_t i = 8; i + kl + 8 <= 8 + h; i++)
        if (memcmp(data + i, key, kl) == 0) {
            static const char hex[] = "0123456789abcdef";
            const uint32_t crc = qkv_crc32(0, data + 8 + h, size - 8 - h);
            for (int k = 0; k < 8; k++)
                data[i + kl + (size_t)k] = (uint8_t)hex[(crc >> (28 - 4 * k)) & 15];
            break;
        }
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
    size = LLVMFuzzerMutate(data, size, max_size);
    if ((seed & 1) == 0)
        st_reframe(data, size);
    return size;
}

#endif
