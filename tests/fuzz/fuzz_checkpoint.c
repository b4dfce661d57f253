/*
 * fuzz_checkpoint.c - libFuzzer target: the coreference checkpoint loader
 * (a safetensors file and its metadata) on arbitrary bytes. It must never
 * crash, read out of bounds, leak, or fail without saying why; the seed
 * corpus holds real checkpoints, and st_mutate.h keeps half of the
 * mutations well framed.
 */
#include <stdlib.h>

#include "apps/coref.h"
#include "st_mutate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    qkv_error err = qkv_error_none();
    qkv_coref_model *m =
        qkv_coref_load_buffer(data, size, "fuzz.safetensors", qkv_coref_fingerprint(), &err);
    if (m == NULL && err.status == QKV_OK)
        abort(); /* a refusal must say why */
    qkv_coref_model_free(m);
    return 0;
}
