/*
 * utf8.c - strict UTF-8 validation (RFC 3629): no overlong forms, no
 * surrogates, nothing above U+10FFFF, no truncated sequences; and escaping
 * text for one-line messages.
 */
#include <inttypes.h>
#include <stdio.h>
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
    if (p == NULL && n > 0) { /* no text where n bytes were promised */
        if (bad != NULL)
            *bad = 0;
        return 0;
    }
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

/* The code point of the valid sequence of len bytes at p. */
static uint32_t code_point(const unsigned char *p, size_t len)
{
    static const unsigned char lead_bits[5] = {0, 0x7f, 0x1f, 0x0f, 0x07};
    uint32_t cp = p[0] & lead_bits[len];
    for (size_t k = 1; k < len; k++)
        cp = cp << 6 | (p[k] & 0x3f);
    return cp;
}

size_t qkv_utf8_next(const char *s, size_t n, uint32_t *cp)
{
    if (s == NULL || n == 0)
        return 0;
    const unsigned char *p = (const unsigned char *)s;
    const size_t len = utf8_seq(p, n);
    if (len > 0 && cp != NULL)
        *cp = code_point(p, len);
    return len;
}

/* Nonzero for a code point that prints as nothing, or that controls the
 * terminal or the text's direction: the C1 controls, the no-break space,
 * the soft hyphen, the zero-width and direction marks, the line and
 * paragraph separators, the bidirectional embeddings, overrides and
 * isolates, the invisible operators, the byte-order mark, the interlinear
 * annotation marks and the tag characters; and the noncharacters
 * (U+FDD0..U+FDEF and the last two code points of every plane), which no
 * font draws. A message shows them escaped, so a quoted word never looks
 * empty or reorders the line. */
static int invisible(uint32_t cp)
{
    return (cp >= 0x80 && cp <= 0xa0) || cp == 0xad || (cp >= 0x200b && cp <= 0x200f) ||
           (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x2069) || cp == 0xfeff ||
           (cp >= 0xfff9 && cp <= 0xfffb) || (cp >= 0xe0000 && cp <= 0xe007f) ||
           (cp >= 0xfdd0 && cp <= 0xfdef) || (cp & 0xfffe) == 0xfffe;
}

size_t qkv_escape(char *dst, size_t cap, const char *src)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)src;
    if (dst == NULL || cap == 0)
        return 0;
    size_t n = src != NULL ? strlen(src) : 0, used = 0;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_seq(p + i, n - i);
        if (len > 1 && invisible(code_point(p + i, len))) { /* as \u{feff} */
            char u[16];
            int k = snprintf(u, sizeof u, "\\u{%" PRIx32 "}", code_point(p + i, len));
            if (used + (size_t)k >= cap)
                break;
            memcpy(dst + used, u, (size_t)k);
            used += (size_t)k;
            i += len;
            continue;
        }
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

size_t qkv_escape_elided(char *dst, size_t cap, const char *src, char *work, size_t work_cap)
{
    static const char gap[] = "...";
    const size_t n = qkv_escape(work, work_cap, src);
    if (cap == 0)
        return 0;
    if (n < cap) {
        memcpy(dst, work, n + 1);
        return n;
    }
    if (cap < 2 * (sizeof gap - 1) + 1) /* no room for both ends: the start */
        return qkv_escape(dst, cap, src);
    /* a third of the room for the start (what failed), the rest for the
     * end (usually why), each on a character's boundary */
    const size_t room = cap - 1 - (sizeof gap - 1);
    size_t head = room / 3, from = n - (room - head);
    while (head > 0 && ((unsigned char)work[head] & 0xc0) == 0x80)
        head--;
    while (from < n && ((unsigned char)work[from] & 0xc0) == 0x80)
        from++;
    memcpy(dst, work, head);
    memcpy(dst + head, gap, sizeof gap - 1);
    memcpy(dst + head + sizeof gap - 1, work + from, n - from + 1);
    return head + sizeof gap - 1 + n - from;
}
