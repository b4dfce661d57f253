/*
 * fuzz_checkpoint.c - libFuzzer target: the coreference checkpoint loader
 * on arbitrary bytes. It must never crash, read out of bounds, leak or
 * allocate more than the file's own size calls for.
 *
 * The custom mutator keeps half of its outputs well framed: after the
 * usual mutation it rewrites the declared file size and the CRC-32, so the
 * fuzzer gets past the checksum and into the parser behind it.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "apps/coref.h"

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

#define HEADER 60 /* bytes before the tensors: see checkpoint.h */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    qkv_error err = qkv_error_none();
    qkv_coref_model *m =
        qkv_coref_load_buffer(data, size, "fuzz.qkv", qkv_coref_fingerprint(), &err);
    if (m == NULL && err.status == QKV_OK)
        abort(); /* a refusal must say why */
    qkv_coref_model_free(m);
    return 0;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
    size = LLVMFuzzerMutate(data, size, max_size);
    if ((seed & 1) == 0 || size < HEADER + 4)
        return size;
    uint64_t n = size;
    for (int i = 0; i < 8; i++) /* the u64 file size at offset 12 */
        data[12 + i] = (uint8_t)(n >> (8 * i));
    uint32_t crc = qkv_crc32(0, data, size - 4);
    for (int i = 0; i < 4; i++)
        data[size - 4 + i] = (uint8_t)(crc >> (8 * i));
    return size;
}
