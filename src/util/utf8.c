/*
 * utf8.c - strict UTF-8 validation (RFC 3629): no overlong forms, no
 * surrogates, nothing above U+10FFFF, no truncated sequences; and escaping
 * text for one-line messages.
 */
#include <string.h>

#include "util/util.h"

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned min, cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2, min = 0x80, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3, min = 0x800, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4, min = 0x10000, cp = c & 0x07;
    else
        return 0;
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

int qkv_utf8_valid(const char *s, size_t n, size_t *bad)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_seq(p + i, n - i);
        if (len == 0) {
            if (bad != NULL)
                *bad = i;
            return 0;
        }
        i += len;
    }
    return 1;
}

size_t qkv_escape(char *dst, size_t cap, const char *src)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)src;
    size_t n = strlen(src), used = 0;
    if (cap == 0)
        return 0;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_seq(p + i, n - i);
        int plain = len > 1 || (len == 1 && p[i] >= 0x20 && p[i] != 0x7f);
        size_t need = plain ? len : 4;
        if (used + need >= cap)
            break;
        if (plain) {
            memcpy(dst + used, p + i, len);
            i += len;
        } else { /* a control character or a byte of invalid UTF-8 */
            dst[used] = '\\';
            dst[used + 1] = 'x';
            dst[used + 2] = hex[p[i] >> 4];
            dst[used + 3] = hex[p[i] & 15];
            i++;
        }
        used += need;
    }
    dst[used] = '\0';
    return used;
}
