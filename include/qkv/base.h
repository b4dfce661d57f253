/*
 * base.h - what every qkv module shares: the scalar type, status codes, the
 * error record that functions outside a tape fill in, and the ABI tag that
 * stops a program built for one scalar type from running on the other.
 */
#ifndef QKV_BASE_H
#define QKV_BASE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QKV_VERSION "0.6.0"

/* The scalar type. float32 by default; compile the library and every
 * program that uses it with -DQKV_DOUBLE to get double, which makes
 * finite-difference gradient checks strict. `pkg-config --cflags qkv` gives
 * the flag that matches the installed library. */
#ifdef QKV_DOUBLE
typedef double qkv_real;
#else
typedef float qkv_real;
#endif

/* The interface a program was compiled against: the size of qkv_real and
 * the version of the structs in these headers. The constructors that hand
 * out qkv_real data (qkv_tensor_new, qkv_tape_new and the app models) pass
 * it to the library, which refuses a program whose headers do not match it
 * with QKV_ERR_ABI instead of letting it read floats as doubles. */
#define QKV_ABI_VERSION 4
#define QKV_ABI ((unsigned)sizeof(qkv_real) | ((unsigned)QKV_ABI_VERSION << 8))

#define QKV_MAX_DIMS 4

/* Status codes shared by every module. QKV_OK is zero. */
typedef enum qkv_status {
    QKV_OK = 0,
    QKV_ERR_SHAPE,   /* tensor shapes do not fit the op */
    QKV_ERR_ARG,     /* an argument is out of range or otherwise invalid */
    QKV_ERR_NOMEM,   /* an allocation failed or a size overflowed */
    QKV_ERR_IO,      /* a file could not be opened, read or written */
    QKV_ERR_FORMAT,  /* malformed input: bad file, bad UTF-8, unknown word */
    QKV_ERR_NUMERIC, /* a NaN or an infinity where a finite number belongs */
    QKV_ERR_ABI      /* headers and library disagree (scalar type or version) */
} qkv_status;

/* A short human-readable name for a status ("shape mismatch", ...). Never
 * NULL. */
const char *qkv_status_string(qkv_status s);

/* Why a call outside a tape failed. Every function that can fail and is
 * not an op takes a `qkv_error *err` as its last argument, which may be
 * NULL. On failure it sets err->status and a one-line err->message that
 * names the problem (a path, a value, a shape); on success it leaves err
 * alone. Functions that return a status return err->status too;
 * constructors return NULL (or the nil tensor) instead. Ops report through
 * their tape instead (qkv_tape_status, qkv_tape_error). */
typedef struct qkv_error {
    qkv_status status;
    char message[256];
} qkv_error;

/* A cleared error record: QKV_OK and an empty message. */
qkv_error qkv_error_none(void);

/* Records status s and a printf-style one-line message in e (which may be
 * NULL) and returns s; QKV_OK records nothing. For functions of your own
 * that report errors the way qkv's do. */
qkv_status qkv_error_set(qkv_error *e, qkv_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* How many heap allocations the library has made since the program
 * started (every malloc, calloc, realloc and aligned_alloc it calls). Two
 * readings around a training step tell whether the step allocated. */
size_t qkv_alloc_count(void);

/* CRC-32 (IEEE 802.3, as zlib's crc32) of n bytes, continuing from crc
 * (start with 0). NULL data adds nothing: it returns crc. */
uint32_t qkv_crc32(uint32_t crc, const void *data, size_t n);

/* Checks that s[0..n) is valid UTF-8: no overlong forms, surrogates, code
 * points above U+10FFFF or truncated sequences. Returns 1 if valid;
 * otherwise 0 and the byte offset of the first bad sequence in *bad (which
 * may be NULL). A NULL s is valid for n = 0 only; for more, 0 at offset
 * 0. */
int qkv_utf8_valid(const char *s, size_t n, size_t *bad);

/* Decodes the character at s (n bytes available, as qkv_utf8_valid checks
 * them): returns its length in bytes (1 to 4) with its code point in *cp
 * (cp may be NULL), or 0, leaving *cp untouched, when s is NULL, n is 0 or
 * the bytes there are not a whole valid character. A loop over a text
 * steps by the return value and stops at 0. */
size_t qkv_utf8_next(const char *s, size_t n, uint32_t *cp);

/* Copies src into dst (cap bytes, always NUL-terminated) for a one-line
 * message: control characters, DEL and bytes of invalid UTF-8 become \xNN,
 * and characters that print as nothing or steer the terminal or the text's
 * direction (C1 controls, U+00A0, U+200B..U+200F, U+202A..U+202E, U+FEFF,
 * ...) and the noncharacters (U+FFFE, U+FFFF, ...) become \u{XXXX};
 * other valid UTF-8 (Chinese included) stays as it is. Stops before a
 * character that would not fit. Returns the length written: 0, writing
 * nothing, for a NULL dst or a cap of 0; a NULL src is "". */
size_t qkv_escape(char *dst, size_t cap, const char *src);

#ifdef __cplusplus
}
#endif
#endif
