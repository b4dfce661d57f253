/*
 * crc32.c - CRC-32 (IEEE 802.3), bit by bit: checkpoints and vocabulary
 * fingerprints are small, so a table would buy nothing.
 */
#include "util/util.h"

uint32_t qkv_crc32(uint32_t crc, const void *data, size_t n)
{
    const unsigned char *p = data;
    if (p == NULL) /* no bytes to add */
        return crc;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int b = 0; b < 8; b++)
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}
