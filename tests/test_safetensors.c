/*
 * test_safetensors.c - weights in the safetensors format: the exact bytes
 * qkv writes, files other writers make, and every rejection of the strict
 * loader, each from a file written by hand here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests.h"

static char dir[64];
static char path[128];

static void setup(void)
{
    strcpy(dir, "/tmp/qkv_st_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
}

static void teardown(void)
{
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* A list with "w" [2,3] = 1..6 and "b" [3] = -1, -2, -3. */
static qkv_params *two_params(void)
{
    qkv_params *p = qkv_params_new(1, NULL);
    ck_assert_ptr_nonnull(p);
    const int ws[2] = {2, 3}, bs[1] = {3};
    qkv_tensor *w = qkv_params_add(p, "w", 2, ws, (qkv_init){QKV_INIT_ZEROS, 0, 0}, NULL);
    qkv_tensor *b = qkv_params_add(p, "b", 1, bs, (qkv_init){QKV_INIT_ZEROS, 0, 0}, NULL);
    ck_assert_ptr_nonnull(w);
    ck_assert_ptr_nonnull(b);
    for (int i = 0; i < 6; i++)
        w->data[i] = (qkv_real)(i + 1);
    for (int i = 0; i < 3; i++)
        b->data[i] = (qkv_real) - (i + 1);
    return p;
}

/* A file in memory: the 8-byte length, the header, then dlen data bytes. */
typedef struct file {
    unsigned char *b;
    size_t n;
} file;

static file make(const char *header, const void *data, size_t dlen)
{
    size_t h = strlen(header);
    file f = {malloc(8 + h + dlen + 1), 8 + h + dlen};
    ck_assert_ptr_nonnull(f.b);
    for (int k = 0; k < 8; k++)
        f.b[k] = (unsigned char)((uint64_t)h >> (8 * k));
    memcpy(f.b + 8, header, h);
    if (dlen)
        memcpy(f.b + 8 + h, data, dlen);
    return f;
}

/* Little-endian float32 bytes of v[0..n). */
static void f32le(const float *v, int n, unsigned char *out)
{
    for (int i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int k = 0; k < 4; k++)
            out[4 * i + k] = (unsigned char)(u >> (8 * k));
    }
}

/* Little-endian bytes of 16-bit patterns v[0..n) (F16 or BF16). */
static void u16le(const uint16_t *v, int n, unsigned char *out)
{
    for (int i = 0; i < n; i++) {
        out[2 * i] = (unsigned char)(v[i] & 0xff);
        out[2 * i + 1] = (unsigned char)(v[i] >> 8);
    }
}

/* The data of two_params as F32: w then b, 36 bytes. */
static void wb_data(unsigned char out[36])
{
    const float v[9] = {1, 2, 3, 4, 5, 6, -1, -2, -3};
    f32le(v, 9, out);
}

/* Parses f and expects failure with this status and a message part; and
 * then that loading it into two_params changes nothing. */
static void expect_reject(file f, qkv_status want, const char *part)
{
    qkv_error err = qkv_error_none();
    qkv_st *st = qkv_st_parse(f.b, f.n, "t.safetensors", &err);
    ck_assert_ptr_null(st);
    ck_assert_int_eq(err.status, want);
    ck_assert_msg(strstr(err.message, part) != NULL, "message '%s' lacks '%s'", err.message, part);
    ck_assert_msg(strchr(err.message, '\n') == NULL, "'%s' is not one line", err.message);
    free(f.b);
}

/* Parses f (which must parse), loads it into p and expects this failure,
 * with p unchanged. */
static void expect_load_reject(file f, qkv_params *p, qkv_status want, const char *part)
{
    qkv_error err = qkv_error_none();
    qkv_st *st = qkv_st_parse(f.b, f.n, "t.safetensors", &err);
    ck_assert_msg(st != NULL, "%s", err.message);
    const qkv_tensor *w = qkv_params_get(p, "w");
    qkv_real before = w->data[0];
    ck_assert_int_eq(qkv_st_load(st, p, &err), want);
    ck_assert_msg(strstr(err.message, part) != NULL, "message '%s' lacks '%s'", err.message, part);
    ck_assert(w->data[0] == before);
    qkv_st_close(st);
    free(f.b);
}

#define W_ENTRY "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}"
#define B_ENTRY "\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[24,36]}"

START_TEST(test_qkv_writes_the_format_byte_for_byte)
{
    qkv_params *p = two_params();
    ck_assert_int_eq(qkv_safetensors_save(p, path, NULL, 0, NULL), QKV_OK);
    size_t n;
    unsigned char *b = qkv_read_file(path, 1 << 20, &n, NULL);
    ck_assert_ptr_nonnull(b);
    uint64_t h = 0;
    for (int k = 7; k >= 0; k--)
        h = h << 8 | b[k];
    ck_assert_uint_eq((8 + h) % 8, 0); /* the data is 8-byte aligned */
    const size_t d = sizeof(qkv_real);
    ck_assert_uint_eq(n, 8 + h + 9 * d);
    /* the header, as JSON: qkv's metadata first, then the tensors in
     * order; the CRC is that of the data bytes (checked by zlib's CRC-32
     * of the F32 data 1..6, -1..-3: 0x51d517f6, computed with CPython's
     * zlib.crc32) */
    char want[512];
#ifdef QKV_DOUBLE
    snprintf(want, sizeof want,
             "{\"__metadata__\":{\"qkv_format\":\"1\",\"qkv_crc32\":\"%08x\"},"
             "\"w\":{\"dtype\":\"F64\",\"shape\":[2,3],\"data_offsets\":[0,48]},"
             "\"b\":{\"dtype\":\"F64\",\"shape\":[3],\"data_offsets\":[48,72]}}",
             (unsigned)qkv_crc32(0, b + 8 + h, 72));
#else
    snprintf(want, sizeof want,
             "{\"__metadata__\":{\"qkv_format\":\"1\",\"qkv_crc32\":\"51d517f6\"}," W_ENTRY
             "," B_ENTRY "}");
    unsigned char data[36];
    wb_data(data);
    ck_assert(memcmp(b + 8 + h, data, 36) == 0);
#endif
    size_t wl = strlen(want);
    ck_assert_uint_ge(h, wl);
    ck_assert_msg(memcmp(b + 8, want, wl) == 0, "header '%.*s'", (int)h, (char *)b + 8);
    for (size_t k = wl; k < h; k++) /* then spaces up to the alignment */
        ck_assert_int_eq(b[8 + k], ' ');
    free(b);
    /* and it loads back exactly */
    qkv_params *q = two_params();
    qkv_params_zero_grad(q);
    qkv_tensor *w = qkv_params_get(q, "w");
    w->data[0] = 100;
    ck_assert_int_eq(qkv_safetensors_load(q, path, NULL), QKV_OK);
    ck_assert(w->data[0] == 1 && w->data[5] == 6 && qkv_params_get(q, "b")->data[2] == -3);
    qkv_params_free(p);
    qkv_params_free(q);
}
END_TEST

START_TEST(test_files_of_other_writers_load)
{
    /* another writer: keys in another order, whitespace, no metadata of
     * qkv's, other metadata, tensors stored out of order, one of them F64
     * (rounded to float32 in a float build) */
    unsigned char data[36 + 12];
    const float w[6] = {1, 2, 3, 4, 5, 6};
    f32le(w, 6, data + 24);
    const double bv[3] = {-1, -2, 0.1};
    for (int i = 0; i < 3; i++) {
        uint64_t u;
        memcpy(&u, &bv[i], 8);
        for (int k = 0; k < 8; k++)
            data[8 * i + k] = (unsigned char)(u >> (8 * k));
    }
    file f = make("{ \"b\" : {\"data_offsets\":[0,24], \"shape\":[3], \"dtype\":\"F64\"},\n"
                  "  \"__metadata__\": {\"format\": \"pt\"},\n"
                  "  \"w\": {\"shape\": [2, 3], \"dtype\": \"F32\", \"data_offsets\": [24, 48]} } ",
                  data, 48);
    qkv_error err = qkv_error_none();
    qkv_st *st = qkv_st_parse(f.b, f.n, "other", &err);
    ck_assert_msg(st != NULL, "%s", err.message);
    ck_assert_int_eq(qkv_st_count(st), 2);
    ck_assert_str_eq(qkv_st_name(st, 0), "b");
    ck_assert_str_eq(qkv_st_dtype(st, 0), "F64");
    ck_assert_str_eq(qkv_st_meta(st, "format"), "pt");
    int shape[QKV_MAX_DIMS];
    ck_assert_int_eq(qkv_st_shape(st, 1, shape), 2);
    ck_assert(shape[0] == 2 && shape[1] == 3);
    ck_assert_int_eq(qkv_st_shape(st, 1, NULL), -1); /* wrote through NULL */
    qkv_params *p = two_params();
    ck_assert_int_eq(qkv_st_load(st, p, &err), QKV_OK);
    const qkv_tensor *b = qkv_params_get(p, "b");
    ck_assert(b->data[0] == -1 && b->data[1] == -2 && b->data[2] == (qkv_real)0.1);
    ck_assert(qkv_params_get(p, "w")->data[4] == 5);
    qkv_st_close(st);
    qkv_params_free(p);
    free(f.b);
}
END_TEST

/* Parses f, which must parse; the caller closes what it returns. */
static qkv_st *parse_ok(file f)
{
    qkv_error err = qkv_error_none();
    qkv_st *st = qkv_st_parse(f.b, f.n, "t.safetensors", &err);
    ck_assert_msg(st != NULL, "%s", err.message);
    free(f.b);
    return st;
}

/* The reader's limits, each at its edge: a name or a metadata string of
 * 1024 bytes is read and one of 1025 is not; a shape of 8 dimensions is
 * read and one of 9 is not; qkv_st_shape gives up to QKV_MAX_DIMS (4)
 * dimensions that fit an int, and -1, writing nothing past them, for more
 * dimensions or a dimension over 2^31 - 1. */
START_TEST(test_names_and_shapes_at_the_readers_limits)
{
    char h[1200], name[1026];
    memset(name, 'n', sizeof name);
    name[1024] = '\0';
    snprintf(h, sizeof h, "{\"%s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", name);
    qkv_st *st = parse_ok(make(h, "\0\0\0\0", 4));
    ck_assert_str_eq(qkv_st_name(st, 0), name);
    qkv_st_close(st);
    name[1024] = 'n';
    name[1025] = '\0';
    snprintf(h, sizeof h, "{\"%s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", name);
    expect_reject(make(h, "\0\0\0\0", 4), QKV_ERR_FORMAT,
                  "a tensor name is too long or holds a NUL");
    name[1024] = '\0';
    snprintf(h, sizeof h, "{\"__metadata__\":{\"note\":\"%s\"}}", name);
    st = parse_ok(make(h, NULL, 0));
    ck_assert_str_eq(qkv_st_meta(st, "note"), name);
    qkv_st_close(st);
    name[1024] = 'n';
    snprintf(h, sizeof h, "{\"__metadata__\":{\"note\":\"%s\"}}", name);
    expect_reject(make(h, NULL, 0), QKV_ERR_FORMAT, "a __metadata__ string is too long");
    /* dimensions: 4 fit shape, 5 and 8 are read but do not, 9 are refused */
    int shape[QKV_MAX_DIMS + 1];
    st = parse_ok(make("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,2,1,3],\"data_offsets\":[0,24]}}",
                       "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 24));
    ck_assert_int_eq(qkv_st_shape(st, 0, shape), 4);
    ck_assert(shape[0] == 1 && shape[1] == 2 && shape[2] == 1 && shape[3] == 3);
    qkv_st_close(st);
    static const char *const more[2] = {"[1,1,1,1,2]", "[1,1,1,1,1,1,1,2]"};
    for (int i = 0; i < 2; i++) {
        snprintf(h, sizeof h, "{\"w\":{\"dtype\":\"F32\",\"shape\":%s,\"data_offsets\":[0,8]}}",
                 more[i]);
        st = parse_ok(make(h, "\0\0\0\0\0\0\0\0", 8));
        for (int d = 0; d <= QKV_MAX_DIMS; d++)
            shape[d] = -7;
        ck_assert_int_eq(qkv_st_shape(st, 0, shape), -1);
        for (int d = 0; d <= QKV_MAX_DIMS; d++)
            ck_assert_int_eq(shape[d], -7);
        qkv_st_close(st);
    }
    expect_reject(make("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                       "\"data_offsets\":[0,4]}}",
                       "\0\0\0\0", 4),
                  QKV_ERR_FORMAT, "tensor 'w' needs a shape of at most 8 whole numbers");
    /* an empty tensor may have a dimension an int cannot hold */
    st = parse_ok(make("{\"e\":{\"dtype\":\"F32\",\"shape\":[2147483647,0],\"data_offsets\":[0,0]},"
                       "\"f\":{\"dtype\":\"F32\",\"shape\":[0,2147483648],\"data_offsets\":[0,0]}}",
                       NULL, 0));
    ck_assert_int_eq(qkv_st_shape(st, 0, shape), 2);
    ck_assert(shape[0] == 2147483647 && shape[1] == 0);
    ck_assert_int_eq(qkv_st_shape(st, 1, shape), -1);
    qkv_st_close(st);
}
END_TEST

/* A tensor with no elements (shape [0], data_offsets [k, k]), as other
 * writers store one, takes no bytes: it begins where the next tensor
 * does, whichever of the two the header names first. */
START_TEST(test_an_empty_tensor_takes_no_bytes)
{
    unsigned char d[36];
    wb_data(d);
    static const char *const headers[] = {
        "{\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}," W_ENTRY "," B_ENTRY "}",
        "{" W_ENTRY ",\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}," B_ENTRY "}",
        "{" W_ENTRY "," B_ENTRY
        ",\"e\":{\"dtype\":\"F32\",\"shape\":[2,0],\"data_offsets\":[24,24]}}",
        "{" W_ENTRY "," B_ENTRY
        ",\"e\":{\"dtype\":\"F64\",\"shape\":[0],\"data_offsets\":[36,36]}}",
    };
    for (size_t i = 0; i < sizeof headers / sizeof headers[0]; i++) {
        file f = make(headers[i], d, 36);
        qkv_error err = qkv_error_none();
        qkv_st *st = qkv_st_parse(f.b, f.n, "t.safetensors", &err);
        ck_assert_msg(st != NULL, "%s: %s", headers[i], err.message);
        ck_assert_int_eq(qkv_st_count(st), 3);
        qkv_st_close(st);
        free(f.b);
    }
}
END_TEST

START_TEST(test_the_header_length_must_fit_the_file_and_the_cap)
{
    unsigned char d[36];
    wb_data(d);
    file f = make("{" W_ENTRY "," B_ENTRY "}", d, 36);
    f.b[0] = 0xff; /* the length, now far past the end */
    f.b[1] = 0x7f;
    expect_reject(f, QKV_ERR_FORMAT, "goes past the end of the file");
    /* every one of the 8 bytes counts: a top byte of 1 is 2^56 more */
    f = make("{" W_ENTRY "," B_ENTRY "}", d, 36);
    f.b[7] = 1;
    expect_reject(f, QKV_ERR_FORMAT, "goes past the end of the file");
    f = make("{}", NULL, 0);
    f.n = 5;
    expect_reject(f, QKV_ERR_FORMAT, "not a safetensors file: 5 bytes");
    f = make("{}", NULL, 0); /* one byte short of the length */
    f.n = 7;
    expect_reject(f, QKV_ERR_FORMAT, "not a safetensors file: 7 bytes");
    f = make("{}", NULL, 0);
    memset(f.b, 0, 8);
    expect_reject(f, QKV_ERR_FORMAT, "its header length is 0 (a header is a JSON object");
    /* a length one byte past the end: {} in a 10-byte file said to be 3
     * bytes long (the byte after the file set, so that only the length
     * check can refuse it) */
    f = make("{}", NULL, 0);
    f.b[0] = 3;
    f.b[10] = ' ';
    expect_reject(f, QKV_ERR_FORMAT,
                  "its header length 3 goes past the end of the file (10 bytes)");
    /* a header over the cap (here all spaces after {}) in a file as long */
    size_t h = QKV_SAFETENSORS_MAX_HEADER + 8;
    char *big = malloc(h + 1);
    memset(big, ' ', h);
    big[0] = '{';
    big[1] = '}';
    big[h] = '\0';
    f = make(big, NULL, 0);
    free(big);
    expect_reject(f, QKV_ERR_FORMAT, "is over the limit of 1048576");
    /* the cap is inclusive: a header of exactly 2^20 bytes is read (no
     * tensors, no data), one of 2^20 + 1 is not */
    h = QKV_SAFETENSORS_MAX_HEADER;
    big = malloc(h + 2);
    memset(big, ' ', h + 1);
    big[0] = '{';
    big[1] = '}';
    big[h] = '\0';
    f = make(big, NULL, 0);
    qkv_error err = qkv_error_none();
    qkv_st *st = qkv_st_parse(f.b, f.n, "t.safetensors", &err);
    ck_assert_msg(st != NULL, "%s", err.message);
    ck_assert_int_eq(qkv_st_count(st), 0);
    qkv_st_close(st);
    free(f.b);
    big[h] = ' ';
    big[h + 1] = '\0';
    f = make(big, NULL, 0);
    free(big);
    expect_reject(f, QKV_ERR_FORMAT, "a header of 1048577 bytes is over the limit of 1048576");
}
END_TEST

START_TEST(test_the_header_must_be_strict_json)
{
    unsigned char d[36];
    wb_data(d);
    /* invalid: a missing brace, a trailing comma, a lone surrogate, bad
     * UTF-8 in a name; each names its byte offset */
    expect_reject(make("{" W_ENTRY "," B_ENTRY, d, 36), QKV_ERR_FORMAT, "byte");
    expect_reject(make("{" W_ENTRY "," B_ENTRY ",}", d, 36), QKV_ERR_FORMAT, "byte");
    expect_reject(make("{\"\\ud800\":{}}", NULL, 0), QKV_ERR_FORMAT,
                  "bad escape in a string at byte 2");
    expect_reject(make("{\"\xc3\x28\":{}}", NULL, 0), QKV_ERR_FORMAT, "UTF-8");
    expect_reject(make("[1,2]", NULL, 0), QKV_ERR_FORMAT, "must be a JSON object");
    /* nested too deep: 40 arrays inside the metadata */
    char deep[256] = "{\"__metadata__\":";
    for (int i = 0; i < 40; i++)
        strcat(deep, "[");
    for (int i = 0; i < 40; i++)
        strcat(deep, "]");
    strcat(deep, "}");
    expect_reject(make(deep, NULL, 0), QKV_ERR_FORMAT, "nesting too deep at byte 31");
    /* a duplicate key: two tensors named w; the message names the key and
     * the first byte of its second place (it gave the object's first byte, 0) */
    expect_reject(make("{" W_ENTRY "," W_ENTRY "}", d, 24), QKV_ERR_FORMAT,
                  "an object repeats the key \"w\" at byte 58");
    /* a duplicate key inside an entry */
    expect_reject(make("{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2,3],"
                       "\"data_offsets\":[0,24]}}",
                       d, 24),
                  QKV_ERR_FORMAT, "an object repeats the key \"dtype\" at byte 21");
    /* two keys repeated: the one that repeats first in the text is named
     * (z again at byte 34, counted by hand; b only at 42) */
    expect_reject(
        make("{\"__metadata__\":{\"z\":\"1\",\"b\":\"2\",\"z\":\"3\",\"b\":\"4\"}}", NULL, 0),
        QKV_ERR_FORMAT, "an object repeats the key \"z\" at byte 34");
    /* metadata that is not strings */
    expect_reject(make("{\"__metadata__\":{\"a\":1}}", NULL, 0), QKV_ERR_FORMAT,
                  "__metadata__ values must be strings (byte 29)");
}
END_TEST

/* The edges of strict JSON in a header (RFC 8259), each value worked out
 * by hand or by CPython's json module: a low surrogate alone is no escape;
 * a surrogate pair decodes to its one code point (json.loads gives
 * U+1F600, U+10000 and U+10FFFF, whose UTF-8 is below); every byte below
 * 0x20 must be escaped in a string, 0x1f too, while DEL (0x7f) need not
 * be; and a whole number may be 2^53 but not 2^53 + 1. */
START_TEST(test_header_json_at_its_edges)
{
    unsigned char d[24] = {0};
    expect_reject(make("{\"\\udc00\":{}}", NULL, 0), QKV_ERR_FORMAT,
                  "bad escape in a string at byte 2");
    expect_reject(make("{\"__metadata__\":{\"a\":\"x\\udfff\"}}", NULL, 0), QKV_ERR_FORMAT,
                  "bad escape in a string at byte 23");
    /* the pairs: high D83D low DE00, the first pair D800 DC00, the last DBFF DFFF */
    file f = make("{\"__metadata__\":{\"a\":\"\\ud83d\\ude00\",\"b\":\"\\ud800\\udc00\","
                  "\"c\":\"\\udbff\\udfff\",\"d\":\"x\x7fy\"}}",
                  NULL, 0);
    qkv_error err = qkv_error_none();
    qkv_st *st = qkv_st_parse(f.b, f.n, "t.safetensors", &err);
    ck_assert_msg(st != NULL, "%s", err.message);
    ck_assert_str_eq(qkv_st_meta(st, "a"), "\xf0\x9f\x98\x80");
    ck_assert_str_eq(qkv_st_meta(st, "b"), "\xf0\x90\x80\x80");
    ck_assert_str_eq(qkv_st_meta(st, "c"), "\xf4\x8f\xbf\xbf");
    ck_assert_str_eq(qkv_st_meta(st, "d"), "x\x7fy");
    qkv_st_close(st);
    free(f.b);
    /* raw control bytes: 0x1f (the last of them) and 0x01, in a value and a key */
    expect_reject(make("{\"__metadata__\":{\"a\":\"x\x1f\"}}", NULL, 0), QKV_ERR_FORMAT,
                  "a control character in a string at byte 23");
    expect_reject(make("{\"__metadata__\":{\"\x01\":\"x\"}}", NULL, 0), QKV_ERR_FORMAT,
                  "a control character in a string at byte 18");
    /* 2^53 + 1 is no exact JSON whole number; 2^53 is, and fails only on its size */
    expect_reject(make("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],"
                       "\"data_offsets\":[0,9007199254740993]}}",
                       d, 24),
                  QKV_ERR_FORMAT,
                  "tensor 'w' needs data_offsets [begin, end], two whole numbers of at most "
                  "2^53");
    expect_reject(make("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],"
                       "\"data_offsets\":[0,9007199254740992]}}",
                       d, 24),
                  QKV_ERR_FORMAT,
                  "tensor 'w': data_offsets [0, 9007199254740992] hold 9007199254740992 bytes");
    /* no leading zeros (CPython's json.loads refuses [0,024], [02] and
     * [-01] too): the number ends at its 0, and the next digit is where a
     * ',' or ']' should be */
    expect_reject(
        make("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,024]}}", d, 24),
        QKV_ERR_FORMAT, "a ',' or ']' was expected at byte 53");
    expect_reject(
        make("{\"w\":{\"dtype\":\"F32\",\"shape\":[02,3],\"data_offsets\":[0,24]}}", d, 24),
        QKV_ERR_FORMAT, "a ',' or ']' was expected at byte 30");
    expect_reject(
        make("{\"w\":{\"dtype\":\"F32\",\"shape\":[-01],\"data_offsets\":[0,24]}}", d, 24),
        QKV_ERR_FORMAT, "a ',' or ']' was expected at byte 31");
}
END_TEST

/* More of the grammar, each case as CPython's json.loads reads it: a
 * number needs digits after its '.' and after its exponent ([1.], [1e]
 * and [1e+] are refused); nothing but spaces may follow the value ("{} x"
 * is extra data); and the escapes decode as json.loads decodes
 * "\u00E9\uD83D\uDE00\/\b\f\n\r\t\"\\": é, U+1F600 (hex digits in
 * capitals too), '/', the five control characters, '"' and '\'. */
START_TEST(test_header_json_grammar_as_cpython_reads_it)
{
    expect_reject(
        make("{\"w\":{\"dtype\":\"F32\",\"shape\":[1.],\"data_offsets\":[0,4]}}", NULL, 0),
        QKV_ERR_FORMAT, "a malformed number at byte 31");
    expect_reject(
        make("{\"w\":{\"dtype\":\"F32\",\"shape\":[1e],\"data_offsets\":[0,4]}}", NULL, 0),
        QKV_ERR_FORMAT, "a malformed number at byte 31");
    expect_reject(
        make("{\"w\":{\"dtype\":\"F32\",\"shape\":[1e+],\"data_offsets\":[0,4]}}", NULL, 0),
        QKV_ERR_FORMAT, "a malformed number at byte 32");
    expect_reject(make("{} x", NULL, 0), QKV_ERR_FORMAT, "text after the value at byte 3");
    file f = make("{\"__metadata__\":{\"e\":\"\\u00E9\\uD83D\\uDE00\\/\\b\\f\\n\\r\\t\\\"\\\\\"}}",
                  NULL, 0);
    qkv_error err = qkv_error_none();
    qkv_st *st = qkv_st_parse(f.b, f.n, "t.safetensors", &err);
    ck_assert_msg(st != NULL, "%s", err.message);
    ck_assert_str_eq(qkv_st_meta(st, "e"), "\xc3\xa9\xf0\x9f\x98\x80/\b\f\n\r\t\"\\");
    qkv_st_close(st);
    free(f.b);
}
END_TEST

START_TEST(test_each_entry_is_checked)
{
    unsigned char d[36];
    wb_data(d);
    expect_reject(
        make("{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,3],\"data_offsets\":[0,6]}}", d, 6),
        QKV_ERR_FORMAT, "tensor 'w' has dtype 'F8_E4M3'; qkv reads F16, BF16, F32 and F64");
    expect_reject(/* a dtype's name is case-sensitive, as the format's are */
                  make("{\"w\":{\"dtype\":\"bf16\",\"shape\":[2,3],\"data_offsets\":[0,12]}}", d,
                       12),
                  QKV_ERR_FORMAT, "tensor 'w' has dtype 'bf16'; qkv reads F16, BF16, F32 and F64");
    expect_reject(make("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3]}}", NULL, 0), QKV_ERR_FORMAT,
                  "tensor 'w' needs dtype, shape and data_offsets");
    expect_reject(
        make("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,-3],\"data_offsets\":[0,24]}}", d, 24),
        QKV_ERR_FORMAT, "tensor 'w' needs a shape");
    expect_reject(
        make("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[24,0]}}", d, 24),
        QKV_ERR_FORMAT, "tensor 'w': data_offsets [24, 0] end before they begin");
    expect_reject(/* the least inversion, one byte */
                  make("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[24,23]}}", d,
                       24),
                  QKV_ERR_FORMAT, "tensor 'w': data_offsets [24, 23] end before they begin");
    /* an offset past 2^53 (JSON's exact whole numbers) was reported as
     * "begin <= end", which [0, 2^64 - 1] is */
    expect_reject(make("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],"
                       "\"data_offsets\":[0,18446744073709551615]}}",
                       d, 24),
                  QKV_ERR_FORMAT,
                  "tensor 'w' needs data_offsets [begin, end], two whole numbers of at most "
                  "2^53");
    expect_reject(make("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0]}}", d, 24),
                  QKV_ERR_FORMAT, "tensor 'w' needs data_offsets [begin, end], two whole numbers");
    /* 2^32 · 2^32 · 2^4 elements: the size overflows 64 bits */
    expect_reject(make("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],"
                       "\"data_offsets\":[0,24]}}",
                       d, 24),
                  QKV_ERR_FORMAT, "tensor 'w': the size of its shape overflows");
    expect_reject(
        make("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", d, 20),
        QKV_ERR_FORMAT,
        "tensor 'w': data_offsets [0, 20] hold 20 bytes, its dtype and "
        "shape need 24");
    expect_reject(/* and more bytes than the shape needs, even where the file has them */
                  make("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,28]}}", d,
                       28),
                  QKV_ERR_FORMAT,
                  "tensor 'w': data_offsets [0, 28] hold 28 bytes, its dtype and "
                  "shape need 24");
    expect_reject(make("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24],"
                       "\"extra\":1}}",
                       d, 24),
                  QKV_ERR_FORMAT, "tensor 'w' has an unknown field (byte");
}
END_TEST

START_TEST(test_the_tensors_must_tile_the_data)
{
    unsigned char d[48] = {0};
    wb_data(d);
    /* out of range: b's data ends past the file */
    expect_reject(make("{" W_ENTRY "," B_ENTRY "}", d, 30), QKV_ERR_FORMAT,
                  "tensor 'b' ends at data byte 36, past the end of the file's 30 bytes of data");
    /* overlapping: b begins inside w */
    expect_reject(make("{" W_ENTRY
                       ",\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[20,32]}}",
                       d, 36),
                  QKV_ERR_FORMAT, "tensor 'b' overlaps the one before it");
    /* a hole of 4 bytes between w and b (at file byte 8 + header + 24) */
    const char *holed =
        "{" W_ENTRY ",\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[28,40]}}";
    char want[128];
    snprintf(want, sizeof want, "4 bytes of the data at byte %zu belong to no tensor",
             8 + strlen(holed) + 24);
    expect_reject(make(holed, d, 40), QKV_ERR_FORMAT, want);
    /* and the least hole, one byte */
    const char *holed1 =
        "{" W_ENTRY ",\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[25,37]}}";
    snprintf(want, sizeof want,
             ": 1 byte of the data at byte %zu belongs to no tensor (a hole before 'b';",
             8 + strlen(holed1) + 24);
    expect_reject(make(holed1, d, 37), QKV_ERR_FORMAT, want);
    /* bytes after the last tensor */
    expect_reject(make("{" W_ENTRY "," B_ENTRY "}", d, 40), QKV_ERR_FORMAT,
                  "4 bytes after the last tensor");
    /* data that no entry names is most often a tensor left out of the
     * header: the message says so (a review read "768 bytes after the
     * last tensor" for a missing tensor) */
    expect_reject(make("{" W_ENTRY "," B_ENTRY "}", d, 40), QKV_ERR_FORMAT,
                  "belong to no tensor (one missing from the header?)");
    snprintf(want, sizeof want, "a hole before 'b'; one missing from the header?");
    expect_reject(make(holed1, d, 37), QKV_ERR_FORMAT, want);
    /* a huge tensor declared in a small file is refused before anything
     * of its size is allocated: 2^20 x 4096 floats, 16 GiB */
    qkv_alloc_largest(1);
    file f = make("{\"w\":{\"dtype\":\"F32\",\"shape\":[1048576,4096],"
                  "\"data_offsets\":[0,17179869184]}}",
                  d, 48);
    size_t n = f.n;
    expect_reject(f, QKV_ERR_FORMAT, "past the end");
    /* the copy of the file, or the parser's tokens: at most 32 bytes per 3
     * bytes of header (safetensors.h) */
    ck_assert_uint_le(qkv_alloc_largest(0), 11 * n + 16 * 32);
}
END_TEST

START_TEST(test_qkv_metadata_is_checked)
{
    qkv_params *p = two_params();
    ck_assert_int_eq(qkv_safetensors_save(p, path, NULL, 0, NULL), QKV_OK);
    size_t n;
    unsigned char *b = qkv_read_file(path, 1 << 20, &n, NULL);
    b[n - 1] ^= 0x01; /* one flipped bit in the last value */
    file f = {b, n};
    expect_reject(f, QKV_ERR_FORMAT, "corrupted: checksum mismatch");
    b = qkv_read_file(path, 1 << 20, &n, NULL);
    char *fmt = strstr((char *)b + 8, "\"qkv_format\":\"1\"");
    ck_assert_ptr_nonnull(fmt);
    fmt[14] = '7';
    expect_reject((file){b, n}, QKV_ERR_FORMAT, "has qkv format 7; this qkv reads format 1");
    b = qkv_read_file(path, 1 << 20, &n, NULL);
    char *crc = strstr((char *)b + 8, "\"qkv_crc32\":\"");
    ck_assert_ptr_nonnull(crc);
    crc[13] = 'G';
    expect_reject((file){b, n}, QKV_ERR_FORMAT, "a damaged qkv_crc32");
    /* the formats either side of 1: 0 is no format, 2 is a newer one */
    b = qkv_read_file(path, 1 << 20, &n, NULL);
    strstr((char *)b + 8, "\"qkv_format\":\"1\"")[14] = '0';
    expect_reject((file){b, n}, QKV_ERR_FORMAT, "a damaged qkv_format");
    /* a format is digits only: "+1" and " 1", which strtol reads as 1, are
     * damaged; "1" itself, in a file of no tensors, is read */
    expect_reject(make("{\"__metadata__\":{\"qkv_format\":\"+1\"}}", NULL, 0), QKV_ERR_FORMAT,
                  "a damaged qkv_format");
    expect_reject(make("{\"__metadata__\":{\"qkv_format\":\" 1\"}}", NULL, 0), QKV_ERR_FORMAT,
                  "a damaged qkv_format");
    file one = make("{\"__metadata__\":{\"qkv_format\":\"1\"}}", NULL, 0);
    qkv_st *st1 = qkv_st_parse(one.b, one.n, "t.safetensors", NULL);
    ck_assert_ptr_nonnull(st1);
    qkv_st_close(st1);
    free(one.b);
    b = qkv_read_file(path, 1 << 20, &n, NULL);
    strstr((char *)b + 8, "\"qkv_format\":\"1\"")[14] = '2';
    expect_reject((file){b, n}, QKV_ERR_FORMAT, "has qkv format 2; this qkv reads format 1");
    /* a CRC is 8 hex digits: the data's own CRC (51d517f6, from CPython's
     * zlib.crc32 of wb_data's 36 bytes) passes, and the same value with a
     * leading 0, 9 digits, is damaged */
    unsigned char d[36];
    wb_data(d);
    file ok =
        make("{\"__metadata__\":{\"qkv_crc32\":\"51d517f6\"}," W_ENTRY "," B_ENTRY "}", d, 36);
    qkv_error err = qkv_error_none();
    qkv_st *st = qkv_st_parse(ok.b, ok.n, "t.safetensors", &err);
    ck_assert_msg(st != NULL, "%s", err.message);
    qkv_st_close(st);
    free(ok.b);
    expect_reject(
        make("{\"__metadata__\":{\"qkv_crc32\":\"051d517f6\"}," W_ENTRY "," B_ENTRY "}", d, 36),
        QKV_ERR_FORMAT, "a damaged qkv_crc32");
    expect_reject(/* and so are the right 8 digits with anything after them */
                  make("{\"__metadata__\":{\"qkv_crc32\":\"51d517f6x\"}," W_ENTRY "," B_ENTRY "}",
                       d, 36),
                  QKV_ERR_FORMAT, "a damaged qkv_crc32");
    qkv_params_free(p);
}
END_TEST

START_TEST(test_loading_matches_names_and_shapes)
{
    unsigned char d[40] = {0}; /* w, b, and 4 bytes for the unexpected c */
    wb_data(d);
    qkv_params *p = two_params();
    qkv_tensor *w = qkv_params_get(p, "w");
    w->data[0] = 42;
    /* a missing tensor */
    expect_load_reject(make("{" W_ENTRY "}", d, 24), p, QKV_ERR_FORMAT, "has no tensor 'b'");
    /* an unexpected one */
    expect_load_reject(make("{" W_ENTRY "," B_ENTRY
                            ",\"c\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[36,40]}}",
                            d, 40),
                       p, QKV_ERR_FORMAT, "has tensor 'c', which the model does not have");
    /* a shape that differs */
    expect_load_reject(
        make("{\"w\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,24]}," B_ENTRY "}", d,
             36),
        p, QKV_ERR_SHAPE, "tensor 'w' is [3,2], the model's is [2,3]");
    /* a shape with an extra dimension of 1 is another shape */
    expect_load_reject(
        make("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3,1],\"data_offsets\":[0,24]}," B_ENTRY "}", d,
             36),
        p, QKV_ERR_SHAPE, "tensor 'w' is [2,3,1], the model's is [2,3]");
    /* an F64 value beyond float's range: inf in a float build, so refused
     * there; finite, and loaded, in the double build */
    unsigned char wide[48];
    memcpy(wide, d, 24);
    const double bv[3] = {1e39, -2, -3};
    for (int i = 0; i < 3; i++) {
        uint64_t u;
        memcpy(&u, &bv[i], 8);
        for (int k = 0; k < 8; k++)
            wide[24 + 8 * i + k] = (unsigned char)(u >> (8 * k));
    }
    file fw = make("{" W_ENTRY ",\"b\":{\"dtype\":\"F64\",\"shape\":[3],\"data_offsets\":[24,48]}}",
                   wide, 48);
#ifdef QKV_DOUBLE
    {
        qkv_st *st = qkv_st_parse(fw.b, fw.n, "t.safetensors", NULL);
        ck_assert_ptr_nonnull(st);
        ck_assert_int_eq(qkv_st_load(st, p, NULL), QKV_OK);
        ck_assert(qkv_params_get(p, "b")->data[0] == 1e39);
        qkv_st_close(st);
        free(fw.b);
        w->data[0] = 42; /* the load above set it */
    }
#else
    /* in the file's terms (F32, F64), not the library's type */
    expect_load_reject(fw, p, QKV_ERR_NUMERIC,
                       "t.safetensors: tensor 'b' value 0 (1e+39) is beyond F32's range: this "
                       "build reads F32 weights; the file holds F64, as a double build "
                       "(make DOUBLE=1) writes and reads");
#endif
    /* and one nearer the edge, -4e38 (under twice the largest float): as
     * a float it would be -inf */
    const double past = -4e38;
    uint64_t pu;
    memcpy(&pu, &past, 8);
    for (int k = 0; k < 8; k++)
        wide[24 + k] = (unsigned char)(pu >> (8 * k));
    fw = make("{" W_ENTRY ",\"b\":{\"dtype\":\"F64\",\"shape\":[3],\"data_offsets\":[24,48]}}",
              wide, 48);
#ifdef QKV_DOUBLE
    {
        qkv_st *st = qkv_st_parse(fw.b, fw.n, "t.safetensors", NULL);
        ck_assert_ptr_nonnull(st);
        ck_assert_int_eq(qkv_st_load(st, p, NULL), QKV_OK);
        ck_assert(qkv_params_get(p, "b")->data[0] == -4e38);
        qkv_st_close(st);
        free(fw.b);
        w->data[0] = 42;
    }
#else
    expect_load_reject(fw, p, QKV_ERR_NUMERIC,
                       "t.safetensors: tensor 'b' value 0 (-4e+38) is beyond F32's range");
#endif
    /* the largest float (0x7f7fffff, and negated) is finite: it loads */
    unsigned char big[36];
    memcpy(big, d, 36);
    const unsigned char fmax[4] = {0xff, 0xff, 0x7f, 0x7f};
    memcpy(big, fmax, 4);      /* w[0] = 3.4028234663852886e38 */
    memcpy(big + 24, fmax, 4); /* b[0] = -3.4028234663852886e38 */
    big[27] = 0xff;
    {
        file fb = make("{" W_ENTRY "," B_ENTRY "}", big, 36);
        qkv_error err = qkv_error_none();
        qkv_st *st = qkv_st_parse(fb.b, fb.n, "t.safetensors", &err);
        ck_assert_msg(st != NULL, "%s", err.message);
        ck_assert_msg(qkv_st_load(st, p, &err) == QKV_OK, "%s", err.message);
        ck_assert(w->data[0] == (qkv_real)3.4028234663852886e38);
        ck_assert(qkv_params_get(p, "b")->data[0] == (qkv_real)-3.4028234663852886e38);
        qkv_st_close(st);
        free(fb.b);
        w->data[0] = 42; /* the load above set it */
    }
    /* a value that is not finite */
    unsigned char nan[36];
    memcpy(nan, d, 36);
    nan[26] = 0xc0;
    nan[27] = 0x7f; /* b[0] = NaN */
    expect_load_reject(make("{" W_ENTRY "," B_ENTRY "}", nan, 36), p, QKV_ERR_NUMERIC,
                       "t.safetensors: tensor 'b' value 0 is NaN, not a finite number");
    nan[24] = nan[25] = 0;
    nan[26] = 0x80;
    nan[27] = 0xff; /* b[0] = -inf: 0xff800000 */
    expect_load_reject(make("{" W_ENTRY "," B_ENTRY "}", nan, 36), p, QKV_ERR_NUMERIC,
                       "t.safetensors: tensor 'b' value 0 is -infinity, not a finite number");
    ck_assert(w->data[0] == 42); /* no failed load changed anything */
    qkv_params_free(p);
}
END_TEST

/* A file of two_params' w (F32) and a b of three F64 values. */
static file with_f64_b(const double bv[3])
{
    unsigned char d[48];
    wb_data(d);
    for (int i = 0; i < 3; i++) {
        uint64_t u;
        memcpy(&u, &bv[i], 8);
        for (int k = 0; k < 8; k++)
            d[24 + 8 * i + k] = (unsigned char)(u >> (8 * k));
    }
    return make("{" W_ENTRY ",\"b\":{\"dtype\":\"F64\",\"shape\":[3],\"data_offsets\":[24,48]}}", d,
                48);
}

/* Loads f into p and checks that b holds want (exactly). */
static void expect_b(file f, qkv_params *p, const double want[3])
{
    qkv_error err = qkv_error_none();
    qkv_st *st = qkv_st_parse(f.b, f.n, "t.safetensors", &err);
    ck_assert_msg(st != NULL, "%s", err.message);
    ck_assert_msg(qkv_st_load(st, p, &err) == QKV_OK, "%s", err.message);
    const qkv_tensor *b = qkv_params_get(p, "b");
    for (int i = 0; i < 3; i++)
        ck_assert_msg(b->data[i] == (qkv_real)want[i], "b[%d] = %a, not %a", i, (double)b->data[i],
                      want[i]);
    qkv_st_close(st);
    free(f.b);
}

/* An F64 value just past the largest float still rounds to it (round to
 * nearest): only from the midpoint between FLT_MAX = 0x1.fffffep+127 and
 * 2^128 on, 0x1.ffffffp+127 = 2^128 - 2^103, does it round to infinity (a
 * tie goes to the even 2^128). numpy agrees: np.float32 of
 * np.nextafter(FLT_MAX, inf) and of np.nextafter(mid, 0) is FLT_MAX, of mid
 * inf. The float build refused everything above FLT_MAX; the double build
 * loads every one as it is. */
START_TEST(test_f64_values_that_round_to_the_largest_float_load)
{
    const double fmax = ldexp(2 - ldexp(1, -23), 127); /* FLT_MAX */
    const double mid = ldexp(1, 128) - ldexp(1, 103);  /* 0x1.ffffffp+127 */
    const double below = nextafter(mid, 0), above = nextafter(fmax, INFINITY);
    ck_assert(fmax == 0x1.fffffep+127 && mid == 0x1.ffffffp+127);
    ck_assert(above == 0x1.fffffe0000001p+127 && below == 0x1.fffffefffffffp+127);
    qkv_params *p = two_params();
    const double near[3] = {above, below, -below};
#ifdef QKV_DOUBLE
    expect_b(with_f64_b(near), p, near);
    const double edge[3] = {mid, -mid, nextafter(mid, INFINITY)};
    expect_b(with_f64_b(edge), p, edge);
#else
    expect_b(with_f64_b(near), p, (const double[]){fmax, fmax, -fmax});
    /* the midpoint, either sign, is refused: as a float it would be inf */
    expect_load_reject(with_f64_b((const double[]){mid, 1, 1}), p, QKV_ERR_NUMERIC,
                       "t.safetensors: tensor 'b' value 0 (3.40282e+38) is beyond F32's range");
    expect_load_reject(with_f64_b((const double[]){1, -mid, 1}), p, QKV_ERR_NUMERIC,
                       "t.safetensors: tensor 'b' value 1 (-3.40282e+38) is beyond F32's range");
#endif
    qkv_params_free(p);
}
END_TEST

/* A file's metadata keys in the file's order, a tensor's index by name,
 * and one tensor's values, read from a file qkv wrote. */
START_TEST(test_reading_one_tensor_gives_its_values)
{
    qkv_params *p = two_params();
    const qkv_meta_entry meta[2] = {{"note", "他"}, {"a", "b"}};
    ck_assert_int_eq(qkv_safetensors_save(p, path, meta, 2, NULL), QKV_OK);
    qkv_params_free(p);
    qkv_error err = qkv_error_none();
    qkv_st *st = qkv_st_open(path, &err);
    ck_assert_msg(st != NULL, "%s", err.message);
    /* qkv's own entries first, then the caller's, as written */
    ck_assert_int_eq(qkv_st_meta_count(st), 4);
    ck_assert_str_eq(qkv_st_meta_key(st, 0), "qkv_format");
    ck_assert_str_eq(qkv_st_meta_key(st, 1), "qkv_crc32");
    ck_assert_str_eq(qkv_st_meta_key(st, 2), "note");
    ck_assert_str_eq(qkv_st_meta_key(st, 3), "a");
    ck_assert_ptr_null(qkv_st_meta_key(st, 4));
    ck_assert_ptr_null(qkv_st_meta_key(st, -1));
    ck_assert_int_eq(qkv_st_meta_count(NULL), 0);
    ck_assert_ptr_null(qkv_st_meta_key(NULL, 0));
    /* names to indices */
    ck_assert_int_eq(qkv_st_find(st, "w"), 0);
    ck_assert_int_eq(qkv_st_find(st, "b"), 1);
    ck_assert_int_eq(qkv_st_find(st, "c"), -1);
    ck_assert_int_eq(qkv_st_find(st, NULL), -1);
    ck_assert_int_eq(qkv_st_find(NULL, "w"), -1);
    /* the number of values, and the values */
    ck_assert_uint_eq(qkv_st_numel(st, 0), 6);
    ck_assert_uint_eq(qkv_st_numel(st, 1), 3);
    ck_assert_uint_eq(qkv_st_numel(st, 2), 0);
    ck_assert_uint_eq(qkv_st_numel(NULL, 0), 0);
    qkv_real w[6], b[3];
    ck_assert_int_eq(qkv_st_read(st, 0, w, 6, &err), QKV_OK);
    ck_assert_int_eq(qkv_st_read(st, 1, b, 3, NULL), QKV_OK);
    for (int i = 0; i < 6; i++)
        ck_assert_msg(w[i] == i + 1, "w[%d] = %g", i, (double)w[i]);
    ck_assert(b[0] == -1 && b[1] == -2 && b[2] == -3);
    ck_assert_int_eq(err.status, QKV_OK); /* a success leaves err alone */
    qkv_st_close(st);
    /* a tensor of more dimensions than qkv_st_shape gives, and an empty
     * one, have their values too */
    const float v[2] = {0.25f, -8};
    unsigned char d[8];
    f32le(v, 2, d);
    st = parse_ok(make("{\"x\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,2],\"data_offsets\":[0,8]},"
                       "\"e\":{\"dtype\":\"F32\",\"shape\":[3,0],\"data_offsets\":[8,8]}}",
                       d, 8));
    int shape[QKV_MAX_DIMS];
    ck_assert_int_eq(qkv_st_shape(st, 0, shape), -1);
    ck_assert_uint_eq(qkv_st_numel(st, 0), 2);
    ck_assert_uint_eq(qkv_st_numel(st, 1), 0);
    ck_assert_int_eq(qkv_st_read(st, 0, w, 2, NULL), QKV_OK);
    ck_assert(w[0] == (qkv_real)0.25 && w[1] == -8);
    ck_assert_int_eq(qkv_st_read(st, 1, w, 0, NULL), QKV_OK);
    ck_assert_int_eq(qkv_st_meta_count(st), 0);
    ck_assert_ptr_null(qkv_st_meta_key(st, 0));
    qkv_st_close(st);
}
END_TEST

/* qkv_st_dims gives every dimension the file has, where qkv_st_shape
 * stops: 5 and 8 of them, and an empty tensor's dimension past INT_MAX;
 * it writes no more than cap (nothing with cap 0 and dims NULL), and -1
 * for an index out of range or no file. */
START_TEST(test_dims_gives_every_dimension_the_file_has)
{
    qkv_st *st = parse_ok(
        make("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,2,3],\"data_offsets\":[0,24]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2,1,1,1,1,1,1,1],\"data_offsets\":[24,32]},"
             "\"c\":{\"dtype\":\"F32\",\"shape\":[0,4294967296],\"data_offsets\":[32,32]},"
             "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[32,36]}}",
             "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 36));
    uint64_t d[9];
    for (int k = 0; k < 9; k++)
        d[k] = 99;
    ck_assert_int_eq(qkv_st_dims(st, 0, d, 9), 5);
    ck_assert(d[0] == 1 && d[1] == 1 && d[2] == 1 && d[3] == 2 && d[4] == 3 && d[5] == 99);
    ck_assert_int_eq(qkv_st_dims(st, 1, d, 9), 8);
    ck_assert(d[0] == 2 && d[7] == 1 && d[8] == 99);
    ck_assert_int_eq(qkv_st_dims(st, 2, d, 9), 2);
    ck_assert(d[0] == 0 && d[1] == 4294967296u);
    d[0] = 99;
    ck_assert_int_eq(qkv_st_dims(st, 3, d, 9), 0);
    ck_assert(d[0] == 99);
    /* cap: the first cap only */
    for (int k = 0; k < 9; k++)
        d[k] = 99;
    ck_assert_int_eq(qkv_st_dims(st, 0, d, 4), 5);
    ck_assert(d[3] == 2 && d[4] == 99);
    ck_assert_int_eq(qkv_st_dims(st, 0, NULL, 0), 5);
    ck_assert_int_eq(qkv_st_dims(st, 4, d, 9), -1);
    ck_assert_int_eq(qkv_st_dims(st, -1, d, 9), -1);
    ck_assert_int_eq(qkv_st_dims(NULL, 0, d, 9), -1);
    qkv_st_close(st);
}
END_TEST

/* qkv_st_read converts as qkv_st_load does: F64 to float32 to nearest in
 * the float build (0.1 to the float nearest it; just past FLT_MAX to
 * FLT_MAX), a value that would round to infinity refused with load's
 * message; exact in the double build. */
START_TEST(test_reading_f64_rounds_as_loading_does)
{
    const double fmax = 0x1.fffffep+127, mid = 0x1.ffffffp+127;
    const double bv[3] = {0.1, nextafter(fmax, INFINITY), -nextafter(mid, 0)};
    qkv_st *st = parse_ok(with_f64_b(bv));
    qkv_params *p = two_params();
    ck_assert_int_eq(qkv_st_load(st, p, NULL), QKV_OK);
    qkv_real b[3] = {0, 0, 0};
    ck_assert_int_eq(qkv_st_read(st, 1, b, 3, NULL), QKV_OK);
    const qkv_tensor *loaded = qkv_params_get(p, "b");
#ifdef QKV_DOUBLE
    const double want[3] = {bv[0], bv[1], bv[2]};
#else
    const double want[3] = {(double)0.1f, fmax, -fmax};
#endif
    for (int i = 0; i < 3; i++) {
        ck_assert_msg(b[i] == (qkv_real)want[i], "b[%d] = %a, not %a", i, (double)b[i], want[i]);
        ck_assert(memcmp(&b[i], &loaded->data[i], sizeof b[i]) == 0); /* and as loaded */
    }
    qkv_st_close(st);
    qkv_params_free(p);
    st = parse_ok(with_f64_b((const double[]){1, -mid, 1}));
    qkv_error err = qkv_error_none();
    b[1] = 42;
#ifdef QKV_DOUBLE
    ck_assert_int_eq(qkv_st_read(st, 1, b, 3, &err), QKV_OK);
    ck_assert(b[1] == -mid);
#else
    ck_assert_int_eq(qkv_st_read(st, 1, b, 3, &err), QKV_ERR_NUMERIC);
    ck_assert_str_eq(err.message,
                     "t.safetensors: tensor 'b' value 1 (-3.40282e+38) is beyond F32's range: "
                     "this build reads F32 weights; the file holds F64, as a double build "
                     "(make DOUBLE=1) writes and reads");
    ck_assert(b[1] == 42); /* nothing written */
#endif
    qkv_st_close(st);
}
END_TEST

/* Expects qkv_st_read(st, i, out, n) to fail with this status and
 * message, leaving out (at least 6 values) as it was. */
static void expect_read_error(const qkv_st *st, int i, qkv_real *out, size_t n, qkv_status want,
                              const char *message)
{
    qkv_real before[6];
    if (out != NULL)
        memcpy(before, out, sizeof before);
    qkv_error err = qkv_error_none();
    ck_assert_int_eq(qkv_st_read(st, i, out, n, &err), want);
    ck_assert_str_eq(err.message, message);
    ck_assert_int_eq(err.status, want);
    if (out != NULL)
        ck_assert(memcmp(before, out, sizeof before) == 0);
    ck_assert_int_eq(qkv_st_read(st, i, out, n, NULL), want); /* err may be NULL */
}

/* Each refusal is one line naming the file and the tensor (or its index),
 * and writes nothing. */
START_TEST(test_reading_refuses_a_wrong_index_count_or_buffer)
{
    unsigned char d[36];
    wb_data(d);
    qkv_st *st = parse_ok(make("{" W_ENTRY "," B_ENTRY "}", d, 36));
    qkv_real out[6] = {7, 7, 7, 7, 7, 7};
    expect_read_error(st, 0, out, 5, QKV_ERR_ARG,
                      "t.safetensors: tensor 'w' has 6 values, not the 5 asked for");
    expect_read_error(st, 1, out, 6, QKV_ERR_ARG,
                      "t.safetensors: tensor 'b' has 3 values, not the 6 asked for");
    expect_read_error(st, 2, out, 3, QKV_ERR_ARG,
                      "t.safetensors has no tensor 2: its tensors are 0 to 1");
    expect_read_error(st, -1, out, 3, QKV_ERR_ARG,
                      "t.safetensors has no tensor -1: its tensors are 0 to 1");
    expect_read_error(st, 1, NULL, 3, QKV_ERR_ARG,
                      "t.safetensors: tensor 'b': no buffer for its values (NULL)");
    expect_read_error(NULL, 0, out, 6, QKV_ERR_ARG, "safetensors: no file (NULL)");
    qkv_st_close(st);
    st = parse_ok(make("{}", NULL, 0));
    expect_read_error(st, 0, out, 0, QKV_ERR_ARG, "t.safetensors has no tensor 0: it has none");
    qkv_st_close(st);
}
END_TEST

/* A value that is not finite is refused with load's message, naming the
 * tensor and the value; the file's other tensors still read. */
START_TEST(test_reading_refuses_a_value_that_is_not_finite)
{
    unsigned char d[36];
    wb_data(d);
    d[28] = 0x00, d[29] = 0x00, d[30] = 0xc0, d[31] = 0x7f; /* b[1] = NaN (0x7fc00000) */
    qkv_st *st = parse_ok(make("{" W_ENTRY "," B_ENTRY "}", d, 36));
    qkv_real out[6] = {7, 7, 7, 7, 7, 7};
    expect_read_error(st, 1, out, 3, QKV_ERR_NUMERIC,
                      "t.safetensors: tensor 'b' value 1 is NaN, not a finite number");
    ck_assert_int_eq(qkv_st_read(st, 0, out, 6, NULL), QKV_OK);
    ck_assert(out[0] == 1 && out[5] == 6);
    qkv_st_close(st);
    d[28] = 0x00, d[29] = 0x00, d[30] = 0x80, d[31] = 0x7f; /* b[1] = inf (0x7f800000) */
    st = parse_ok(make("{" W_ENTRY "," B_ENTRY "}", d, 36));
    expect_read_error(st, 1, out, 3, QKV_ERR_NUMERIC,
                      "t.safetensors: tensor 'b' value 1 is infinity, not a finite number");
    qkv_st_close(st);
}
END_TEST

/* The two 16-bit dtypes of published weights: F16 (IEEE binary16: a sign,
 * 5 bits of exponent biased by 15, 10 of mantissa) and BF16 (the high 16
 * bits of a float32), each value exact in float. Expected values by hand
 * from those layouts: subnormals (exponent 0: mantissa · 2^-24 for F16,
 * · 2^-133 for BF16), the least normal, the largest finite, ±0. */
START_TEST(test_f16_and_bf16_decode_bit_exactly)
{
    const uint16_t h[12] = {0x0001, 0x0002, 0x03ff, 0x0400, 0x3c00, 0x3555,
                            0xc100, 0x7bff, 0xfbff, 0x8000, 0x0000, 0x8001};
    const double hw[12] = {0x1p-24, 0x1p-23, 0x3ffp-24, 0x1p-14, 1, 0x1.554p-2,
                           -2.5,    65504,   -65504,    -0.0,    0, -0x1p-24};
    const uint16_t b[9] = {0x0001, 0x007f, 0x0080, 0x3f80, 0x7f7f, 0xff7f, 0x8000, 0x4049, 0x8001};
    const double bw[9] = {0x1p-133,     0x7fp-133, 0x1p-126,  1,        0x1.fep+127,
                          -0x1.fep+127, -0.0,      0x1.92p+1, -0x1p-133};
    unsigned char d[42];
    u16le(h, 12, d);
    u16le(b, 9, d + 24);
    qkv_st *st =
        parse_ok(make("{\"h\":{\"dtype\":\"F16\",\"shape\":[12],\"data_offsets\":[0,24]},"
                      "\"b\":{\"dtype\":\"BF16\",\"shape\":[3,3],\"data_offsets\":[24,42]}}",
                      d, 42));
    ck_assert_str_eq(qkv_st_dtype(st, 0), "F16");
    ck_assert_str_eq(qkv_st_dtype(st, 1), "BF16");
    ck_assert_uint_eq(qkv_st_numel(st, 0), 12);
    ck_assert_uint_eq(qkv_st_numel(st, 1), 9);
    qkv_real out[12];
    ck_assert_int_eq(qkv_st_read(st, 0, out, 12, NULL), QKV_OK);
    for (int i = 0; i < 12; i++)
        ck_assert_msg((double)out[i] == hw[i] && !signbit(out[i]) == !signbit(hw[i]),
                      "F16 0x%04x gave %a, not %a", h[i], (double)out[i], hw[i]);
    ck_assert_int_eq(qkv_st_read(st, 1, out, 9, NULL), QKV_OK);
    for (int i = 0; i < 9; i++)
        ck_assert_msg((double)out[i] == bw[i] && !signbit(out[i]) == !signbit(bw[i]),
                      "BF16 0x%04x gave %a, not %a", b[i], (double)out[i], bw[i]);
    qkv_st_close(st);
}
END_TEST

/* F16 and BF16 values that are not finite (exponent all ones: ±infinity,
 * and NaN for any mantissa) are refused as F32 ones are, naming the tensor
 * and the value; when loading, nothing is changed. */
START_TEST(test_f16_and_bf16_that_are_not_finite_are_refused)
{
    const struct {
        const char *dtype;
        uint16_t bits;
        const char *want;
    } c[] = {
        {"F16", 0x7c00, "infinity"},   {"F16", 0xfc00, "-infinity"}, {"F16", 0x7e00, "NaN"},
        {"F16", 0x7c01, "NaN"},        {"F16", 0xffff, "NaN"},       {"BF16", 0x7f80, "infinity"},
        {"BF16", 0xff80, "-infinity"}, {"BF16", 0x7fc0, "NaN"},      {"BF16", 0x7f81, "NaN"},
    };
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        uint16_t v[9] = {0x3c00, 0x4000, 0x4200, 0x4400, 0x4500, 0x4600, 0xbc00, 0xc000, 0xc200};
        v[4] = c[k].bits; /* w[4] */
        unsigned char d[18];
        u16le(v, 9, d);
        char h[256], want[128];
        snprintf(h, sizeof h,
                 "{\"w\":{\"dtype\":\"%s\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
                 "\"b\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[12,18]}}",
                 c[k].dtype);
        snprintf(want, sizeof want, "t.safetensors: tensor 'w' value 4 is %s, not a finite number",
                 c[k].want);
        qkv_params *p = two_params();
        /* values the file does not hold (its w[0] is F16 1, its b two_params'
         * -1 -2 -3), so that a write would show */
        qkv_tensor *w = qkv_params_get(p, "w"), *b = qkv_params_get(p, "b");
        for (int i = 0; i < 6; i++)
            w->data[i] = 10 + i;
        for (int i = 0; i < 3; i++)
            b->data[i] = 20 + i;
        expect_load_reject(make(h, d, 18), p, QKV_ERR_NUMERIC, want);
        for (int i = 0; i < 6; i++) /* w, and b, which is finite, too */
            ck_assert_msg(w->data[i] == 10 + i, "w[%d] = %g", i, (double)w->data[i]);
        for (int i = 0; i < 3; i++)
            ck_assert_msg(b->data[i] == 20 + i, "b[%d] = %g", i, (double)b->data[i]);
        qkv_st *st = parse_ok(make(h, d, 18));
        qkv_real out[6] = {7, 7, 7, 7, 7, 7};
        expect_read_error(st, 0, out, 6, QKV_ERR_NUMERIC, want);
        ck_assert_int_eq(qkv_st_read(st, 1, out, 3, NULL), QKV_OK);
        ck_assert(out[0] == -1 && out[1] == -2 && out[2] == -3);
        qkv_st_close(st);
        qkv_params_free(p);
    }
}
END_TEST

/* A 16-bit tensor's data_offsets must hold 2 bytes a value, no more and no
 * fewer, and an odd count is refused too. */
START_TEST(test_f16_and_bf16_need_two_bytes_a_value)
{
    unsigned char d[24] = {0};
    expect_reject(
        make("{\"w\":{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", d, 24),
        QKV_ERR_FORMAT,
        "tensor 'w': data_offsets [0, 24] hold 24 bytes, its dtype and shape need 12");
    expect_reject(
        make("{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,11]}}", d, 11),
        QKV_ERR_FORMAT,
        "tensor 'w': data_offsets [0, 11] hold 11 bytes, its dtype and shape need 12");
    expect_reject(
        make("{\"w\":{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[0,13]}}", d, 13),
        QKV_ERR_FORMAT,
        "tensor 'w': data_offsets [0, 13] hold 13 bytes, its dtype and shape need 12");
    /* 2^32 · 2^31 values of 2 bytes overflow 64 bits; · 2^30 do not */
    expect_reject(make("{\"w\":{\"dtype\":\"F16\",\"shape\":[4294967296,2147483648],"
                       "\"data_offsets\":[0,12]}}",
                       d, 12),
                  QKV_ERR_FORMAT, "tensor 'w': the size of its shape overflows");
    expect_reject(make("{\"w\":{\"dtype\":\"BF16\",\"shape\":[4294967296,1073741824],"
                       "\"data_offsets\":[0,12]}}",
                       d, 12),
                  QKV_ERR_FORMAT, "its dtype and shape need 9223372036854775808");
    /* every dtype by name, in one file */
    qkv_st *st = parse_ok(make("{\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[14,22]},"
                               "\"b\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[0,2]},"
                               "\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]},"
                               "\"d\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[6,14]}}",
                               d, 22));
    ck_assert_str_eq(qkv_st_dtype(st, 0), "F64");
    ck_assert_str_eq(qkv_st_dtype(st, 1), "BF16");
    ck_assert_str_eq(qkv_st_dtype(st, 2), "F32");
    ck_assert_str_eq(qkv_st_dtype(st, 3), "F16");
    ck_assert_ptr_null(qkv_st_dtype(st, 4));
    ck_assert_uint_eq(qkv_st_numel(st, 1), 1);
    ck_assert_uint_eq(qkv_st_numel(st, 3), 4);
    qkv_st_close(st);
}
END_TEST

/* qkv_safetensors_load, which opens, loads and closes in one call, hands
 * on the error of the step that failed. */
START_TEST(test_loading_by_path_says_why_it_failed)
{
    qkv_params *p = two_params();
    qkv_error err = qkv_error_none();
    ck_assert_int_eq(qkv_safetensors_load(p, path, &err), QKV_ERR_IO); /* no file yet */
    ck_assert_msg(strstr(err.message, path) != NULL, "%s", err.message);
    ck_assert_int_eq(qkv_safetensors_save(p, path, NULL, 0, &err), QKV_OK);
    ck_assert(!qkv_tensor_is_nil(
        qkv_params_add(p, "c", 1, (const int[]){2}, (qkv_init){QKV_INIT_ONES, 0, 0}, NULL)));
    err = qkv_error_none();
    ck_assert_int_eq(qkv_safetensors_load(p, path, &err), QKV_ERR_FORMAT);
    char want[200];
    snprintf(want, sizeof want, "%s has no tensor 'c'", path);
    ck_assert_str_eq(err.message, want);
    ck_assert_int_eq(qkv_safetensors_load(p, path, NULL), QKV_ERR_FORMAT); /* err may be NULL */
    qkv_params_free(p);
}
END_TEST

/* n metadata entries "k0000", "k0001", ... of len bytes of 'x' each (at
 * most 1024); free with free_entries. */
static qkv_meta_entry *many_entries(int n, size_t len)
{
    qkv_meta_entry *e = calloc((size_t)n, sizeof *e);
    ck_assert_ptr_nonnull(e);
    for (int i = 0; i < n; i++) {
        char *k = malloc(16), *v = malloc(len + 1);
        ck_assert(k != NULL && v != NULL);
        snprintf(k, 16, "k%04d", i);
        memset(v, 'x', len);
        v[len] = '\0';
        e[i] = (qkv_meta_entry){k, v};
    }
    return e;
}

static void free_entries(qkv_meta_entry *e, int n)
{
    for (int i = 0; i < n; i++) {
        free((char *)e[i].key);
        free((char *)e[i].value);
    }
    free(e);
}

/* The header length a saved file at path declares, and in *text the
 * length of its JSON without the spaces that pad it. */
static uint64_t saved_header(size_t *text)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    unsigned char b[8];
    ck_assert_uint_eq(fread(b, 1, 8, f), 8);
    uint64_t n = 0;
    for (int k = 7; k >= 0; k--)
        n = n << 8 | b[k];
    char *h = malloc(n);
    ck_assert_ptr_nonnull(h);
    ck_assert_uint_eq(fread(h, 1, n, f), n);
    fclose(f);
    *text = n;
    while (*text > 0 && h[*text - 1] == ' ')
        (*text)--;
    free(h);
    return n;
}

START_TEST(test_saving_refuses_bad_metadata_and_values)
{
    qkv_params *p = two_params();
    qkv_error err = qkv_error_none();
    /* each refusal names its rule: all four said "must be UTF-8 strings,
     * its key not starting with qkv_", which "__metadata__" and a NULL
     * value break neither */
    static const struct {
        qkv_meta_entry e;
        const char *why;
    } refused[] = {
        {{"qkv_crc32", "0"},
         "metadata 0 has a key starting with qkv_, which qkv keeps for its own"},
        {{"note", "\xff"}, "metadata 0 is not UTF-8"},
        {{"__metadata__", "x"}, "metadata 0 has the key __metadata__, the format's own"},
        {{"note", NULL}, "metadata 0 has no key or no value (NULL)"},
    };
    char want[256];
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        err = qkv_error_none();
        ck_assert_int_eq(qkv_safetensors_save(p, path, &refused[i].e, 1, &err), QKV_ERR_ARG);
        snprintf(want, sizeof want, "safetensors: %s; %s was left untouched", refused[i].why, path);
        ck_assert_str_eq(err.message, want);
    }
    /* no metadata array for a count above 0, or a count below 0 */
    ck_assert_int_eq(qkv_safetensors_save(p, path, NULL, 1, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "safetensors: no parameters, path or metadata");
    ck_assert_int_eq(qkv_safetensors_save(p, path, &refused[1].e, -1, &err), QKV_ERR_ARG);
    ck_assert_int_eq(access(path, F_OK), -1);
    /* only the prefix qkv_ is qkv's: "qkv" and "qkv-note" are anyone's */
    const qkv_meta_entry near[2] = {{"qkv", "1"}, {"qkv-note", "2"}};
    ck_assert_msg(qkv_safetensors_save(p, path, near, 2, &err) == QKV_OK, "%s", err.message);
    qkv_st *st = qkv_st_open(path, &err);
    ck_assert_msg(st != NULL, "%s", err.message);
    ck_assert_str_eq(qkv_st_meta(st, "qkv"), "1");
    ck_assert_str_eq(qkv_st_meta(st, "qkv-note"), "2");
    qkv_st_close(st);
    /* metadata with quotes, backslashes, Chinese and control bytes (0x1f,
     * the last of them, and 0x01, which JSON must escape) survives the trip */
    static const char ctl[] = {'a', 0x1f, 'b', 0x01, 'c', '\0'};
    const qkv_meta_entry good[3] = {{"task", "他 → \"小明\"\\"}, {"tab", "a\tb"}, {"ctl", ctl}};
    ck_assert_int_eq(qkv_safetensors_save(p, path, good, 3, &err), QKV_OK);
    st = qkv_st_open(path, &err);
    ck_assert_msg(st != NULL, "%s", err.message);
    ck_assert_str_eq(qkv_st_meta(st, "task"), "他 → \"小明\"\\");
    ck_assert_str_eq(qkv_st_meta(st, "tab"), "a\tb");
    ck_assert_str_eq(qkv_st_meta(st, "ctl"), ctl);
    qkv_st_close(st);
    /* headers the reader would refuse are never written, and the good file
     * stays: a repeated key, and a header over the cap */
    const qkv_meta_entry twice[3] = {{"a", "1"}, {"b", "2"}, {"a", "3"}};
    ck_assert_int_eq(qkv_safetensors_save(p, path, twice, 3, &err), QKV_ERR_ARG);
    ck_assert_msg(strstr(err.message, "metadata 2 repeats the key of metadata 0"), "%s",
                  err.message);
    const qkv_meta_entry next[2] = {{"a", "1"}, {"a", "1"}};
    ck_assert_int_eq(qkv_safetensors_save(p, path, next, 2, &err), QKV_ERR_ARG);
    ck_assert_msg(strstr(err.message, "metadata 1 repeats the key of metadata 0"), "%s",
                  err.message);
    /* a parameter named __metadata__ would repeat the metadata's key: the
     * list refuses the name (test_a_list_holds_named_parameters), so none is saved */
    /* (values are at most 1024 bytes: it takes 1100 of 1000 to pass it) */
    qkv_meta_entry *big = many_entries(1100, 1000);
    ck_assert_int_eq(qkv_safetensors_save(p, path, big, 1100, &err), QKV_ERR_ARG);
    ck_assert_msg(strstr(err.message, "over the limit"), "%s", err.message);
    free_entries(big, 1100);
    ck_assert_ptr_nonnull(st = qkv_st_open(path, &err));
    ck_assert_str_eq(qkv_st_meta(st, "tab"), "a\tb");
    qkv_st_close(st);
    qkv_params_get(p, "b")->data[1] = INFINITY;
    ck_assert_int_eq(qkv_safetensors_save(p, path, NULL, 0, &err), QKV_ERR_NUMERIC);
    ck_assert_msg(strstr(err.message, "b[1] = infinity is not finite"), "%s", err.message);
    qkv_params_get(p, "b")->data[1] = -(qkv_real)NAN; /* printf's "-nan" */
    ck_assert_int_eq(qkv_safetensors_save(p, path, NULL, 0, &err), QKV_ERR_NUMERIC);
    ck_assert_msg(strstr(err.message, "b[1] = NaN is not finite"), "%s", err.message);
    qkv_params_free(p);
}
END_TEST

/* The reader takes metadata keys and values of up to 1024 bytes, so
 * saving refuses a longer one: it wrote a file with a 1025-byte value,
 * which no qkv could then read back. */
START_TEST(test_saving_refuses_metadata_the_reader_would_refuse)
{
    qkv_params *p = two_params();
    qkv_error err = qkv_error_none();
    char *k = malloc(1026), *v = malloc(1026);
    ck_assert(k != NULL && v != NULL);
    memset(k, 'k', 1024);
    memset(v, 'v', 1024);
    k[1024] = v[1024] = '\0';
    const qkv_meta_entry longest[1] = {{k, v}};
    ck_assert_msg(qkv_safetensors_save(p, path, longest, 1, &err) == QKV_OK, "%s", err.message);
    qkv_st *st = qkv_st_open(path, &err);
    ck_assert_msg(st != NULL, "%s", err.message);
    ck_assert_str_eq(qkv_st_meta(st, k), v);
    qkv_st_close(st);
    char want[256];
    for (int i = 0; i < 2; i++) {
        char *s = i == 0 ? v : k;
        s[1024] = s[0], s[1025] = '\0';
        const qkv_meta_entry meta[2] = {{"a", "b"}, {k, v}};
        err = qkv_error_none();
        ck_assert_int_eq(qkv_safetensors_save(p, path, meta, 2, &err), QKV_ERR_ARG);
        snprintf(want, sizeof want,
                 "safetensors: metadata 1 has a key or value over 1024 bytes, which the reader "
                 "refuses; %s was left untouched",
                 path);
        ck_assert_str_eq(err.message, want);
        s[1024] = '\0';
    }
    ck_assert_ptr_nonnull(st = qkv_st_open(path, &err)); /* the first file, as it was */
    ck_assert_str_eq(qkv_st_meta(st, k), v);
    qkv_st_close(st);
    free(k);
    free(v);
    qkv_params_free(p);
}
END_TEST

/* Saving's header cap at its edge: 1036 metadata values of 1000 bytes and
 * a last one as long as makes the header exactly 2^20 bytes, which is
 * written and read; a byte more (padded to 2^20 + 8) is refused, leaving
 * the file as it was. */
START_TEST(test_saving_takes_a_header_of_exactly_the_cap)
{
    qkv_params *p = two_params();
    qkv_error err = qkv_error_none();
    qkv_st *st;
    char want[256];
    enum { N = 1037 };
    qkv_meta_entry *big = many_entries(N, 1000);
    char *last = realloc((char *)big[N - 1].value, 1025);
    ck_assert_ptr_nonnull(last);
    memset(last, 'x', 1024);
    last[1] = last[1024] = '\0';
    big[N - 1].value = last;
    ck_assert_msg(qkv_safetensors_save(p, path, big, N, &err) == QKV_OK, "%s", err.message);
    size_t text;
    saved_header(&text);
    ck_assert(text < QKV_SAFETENSORS_MAX_HEADER);
    const size_t fill = 1 + QKV_SAFETENSORS_MAX_HEADER - text; /* the last value's length */
    ck_assert_msg(fill >= 1 && fill < 1024, "text %zu fill %zu", text, fill);
    last[1] = 'x';
    last[fill] = '\0';
    ck_assert_msg(qkv_safetensors_save(p, path, big, N, &err) == QKV_OK, "%s", err.message);
    ck_assert_uint_eq(saved_header(&text), QKV_SAFETENSORS_MAX_HEADER);
    ck_assert_uint_eq(text, QKV_SAFETENSORS_MAX_HEADER);
    ck_assert_ptr_nonnull(st = qkv_st_open(path, &err));
    ck_assert_uint_eq(strlen(qkv_st_meta(st, "k1036")), fill);
    qkv_st_close(st);
    last[fill] = 'x';
    last[fill + 1] = '\0';
    err = qkv_error_none();
    ck_assert_int_eq(qkv_safetensors_save(p, path, big, N, &err), QKV_ERR_ARG);
    snprintf(want, sizeof want,
             "safetensors: a header of %u bytes is over the limit of %u; %s was left untouched",
             QKV_SAFETENSORS_MAX_HEADER + 8, QKV_SAFETENSORS_MAX_HEADER, path);
    ck_assert_str_eq(err.message, want);
    ck_assert_uint_eq(saved_header(&text), QKV_SAFETENSORS_MAX_HEADER);
    free_entries(big, N);
    qkv_params_free(p);
}
END_TEST

/* A saved file gets the mode fopen would give a new one, 0666 less the
 * umask: it was always 0644, so a umask of 077 still left the weights
 * readable by everyone. The temporary file is gone either way. */
START_TEST(test_saving_follows_the_umask)
{
    qkv_params *p = two_params();
    qkv_error err = qkv_error_none();
    const mode_t masks[3] = {077, 022, 002}, want[3] = {0600, 0644, 0664};
    const mode_t old = umask(077);
    for (int i = 0; i < 3; i++) {
        umask(masks[i]);
        ck_assert_int_eq(qkv_safetensors_save(p, path, NULL, 0, &err), QKV_OK);
        struct stat sb;
        ck_assert_int_eq(stat(path, &sb), 0);
        ck_assert_msg((sb.st_mode & 0777) == want[i], "umask %03o: mode %03o, expected %03o",
                      (unsigned)masks[i], (unsigned)(sb.st_mode & 0777), (unsigned)want[i]);
    }
    umask(old);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -eq 1", dir);
    ck_assert_int_eq(system(cmd), 0);
    qkv_params_free(p);
}
END_TEST

/* Runs the numpy script (scripts/st_numpy.py) with these arguments; its
 * output, which the caller frees. */
static char *numpy(const char *args)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "'%s' '%s/st_numpy.py' %s 2>&1", QKV_PYTHON, QKV_SCRIPTS, args);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    size_t cap = 4096, n = 0;
    char *out = malloc(cap);
    for (size_t k; (k = fread(out + n, 1, cap - 1 - n, f)) > 0;)
        n += k;
    out[n] = '\0';
    int rc = pclose(f);
    ck_assert_msg(rc == 0,
                  "%s failed (numpy is needed: scripts/deps.sh installs python3-numpy):\n%s", cmd,
                  out);
    return out;
}

START_TEST(test_numpy_reads_what_qkv_writes_and_qkv_what_numpy_writes)
{
    /* qkv -> numpy: the script parses the header with Python's json, the
     * values with numpy.frombuffer, and checks the CRC with zlib */
    qkv_params *p = two_params();
    const qkv_meta_entry meta[1] = {{"note", "他"}};
    ck_assert_int_eq(qkv_safetensors_save(p, path, meta, 1, NULL), QKV_OK);
    char args[256];
    snprintf(args, sizeof args, "read '%s'", path);
    char *out = numpy(args);
#ifdef QKV_DOUBLE
    const char *want = "meta note = 他\nmeta qkv_crc32 = 21bb8e6f\nmeta qkv_format = 1\n"
                       "w float64 [2, 3] 1.0 2.0 3.0 4.0 5.0 6.0\n"
                       "b float64 [3] -1.0 -2.0 -3.0\n";
#else
    const char *want = "meta note = 他\nmeta qkv_crc32 = 51d517f6\nmeta qkv_format = 1\n"
                       "w float32 [2, 3] 1.0 2.0 3.0 4.0 5.0 6.0\n"
                       "b float32 [3] -1.0 -2.0 -3.0\n";
#endif
    ck_assert_str_eq(out, want);
    free(out);
    /* numpy -> qkv: w = (1..6)/4 in float32, b = 0.1, -2.5, 0.001 in
     * float64, stored b first, no padding, metadata of its own */
    snprintf(args, sizeof args, "write '%s'", path);
    free(numpy(args));
    qkv_error err = qkv_error_none();
    qkv_st *st = qkv_st_open(path, &err);
    ck_assert_msg(st != NULL, "%s", err.message);
    ck_assert_str_eq(qkv_st_meta(st, "writer"), "numpy 他");
    ck_assert_str_eq(qkv_st_dtype(st, 0), "F64");
    ck_assert_int_eq(qkv_st_load(st, p, &err), QKV_OK);
    const qkv_tensor *w = qkv_params_get(p, "w"), *b = qkv_params_get(p, "b");
    for (int i = 0; i < 6; i++)
        ck_assert(w->data[i] == (qkv_real)(i + 1) / 4);
    ck_assert(b->data[0] == (qkv_real)0.1 && b->data[1] == (qkv_real)-2.5 &&
              b->data[2] == (qkv_real)1e-3);
    /* and read one at a time, by name, the same */
    ck_assert_int_eq(qkv_st_meta_count(st), 1);
    ck_assert_str_eq(qkv_st_meta_key(st, 0), "writer");
    qkv_real v[6];
    ck_assert_int_eq(qkv_st_read(st, qkv_st_find(st, "b"), v, 3, NULL), QKV_OK);
    ck_assert(v[0] == (qkv_real)0.1 && v[1] == (qkv_real)-2.5 && v[2] == (qkv_real)1e-3);
    ck_assert_int_eq(qkv_st_read(st, qkv_st_find(st, "w"), v, 6, NULL), QKV_OK);
    for (int i = 0; i < 6; i++)
        ck_assert(v[i] == (qkv_real)(i + 1) / 4);
    qkv_st_close(st);
    qkv_params_free(p);
}
END_TEST

/* The float32 values numpy gives a tensor, from the line "name v v ..." of
 * out (float.hex, which strtod reads exactly) into want; how many. */
static int numpy_values(const char *out, const char *name, double *want, int cap)
{
    char key[32];
    snprintf(key, sizeof key, "%s ", name);
    const char *s = out;
    while (s != NULL && strncmp(s, key, strlen(key)) != 0)
        s = (s = strchr(s, '\n')) != NULL ? s + 1 : NULL;
    ck_assert_msg(s != NULL, "numpy printed no line for %s:\n%s", name, out);
    s += strlen(key);
    int n = 0;
    for (char *end; n < cap && *s != '\n' && *s != '\0'; s = end, n++) {
        want[n] = strtod(s, &end);
        ck_assert_msg(end != s, "numpy's line for %s: '%s'", name, s);
    }
    return n;
}

/* numpy -> qkv in the 16-bit dtypes: F16 as numpy's float16, BF16 as the
 * high halves of float32 bit patterns; loaded into a parameter list, each
 * value is exactly the float32 numpy makes of it (astype(float32), and
 * the float32 of the pattern shifted up for BF16), -0.0 keeping its sign.
 * Then every finite value of each dtype, beside numpy's float32 of it. */
START_TEST(test_numpy_f16_and_bf16_load_as_numpy_converts_them)
{
    char args[256];
    snprintf(args, sizeof args, "write-half '%s'", path);
    char *out = numpy(args);
    double hw[14], bw[11];
    ck_assert_int_eq(numpy_values(out, "h", hw, 14), 14);
    ck_assert_int_eq(numpy_values(out, "bf", bw, 11), 11);
    free(out);
    /* and numpy's values are the ones asked for: 2^-24 (the least
     * subnormal), 2^-14 - 2^-24 (the largest), 2^-14, 65504, -0.0; BF16's
     * least subnormal 2^-133 and its largest value */
    ck_assert(hw[6] == 0x1p-24 && hw[8] == 0x3ffp-24 && hw[9] == 0x1p-14 && hw[11] == 65504);
    ck_assert(hw[4] == 0 && signbit(hw[4]) && hw[2] == 0x1.998p-4);
    ck_assert(bw[4] == 0x1p-133 && bw[8] == 0x1.fep+127 && bw[3] == 0 && signbit(bw[3]));
    qkv_params *p = qkv_params_new(1, NULL);
    const qkv_init zeros = {QKV_INIT_ZEROS, 0, 0};
    const qkv_tensor *h = qkv_params_add(p, "h", 1, (const int[]){14}, zeros, NULL);
    const qkv_tensor *bf = qkv_params_add(p, "bf", 1, (const int[]){11}, zeros, NULL);
    qkv_error err = qkv_error_none();
    qkv_st *st = qkv_st_open(path, &err);
    ck_assert_msg(st != NULL, "%s", err.message);
    ck_assert_str_eq(qkv_st_dtype(st, qkv_st_find(st, "h")), "F16");
    ck_assert_str_eq(qkv_st_dtype(st, qkv_st_find(st, "bf")), "BF16");
    ck_assert_int_eq(qkv_st_load(st, p, &err), QKV_OK);
    qkv_st_close(st);
    for (int i = 0; i < 14; i++)
        ck_assert_msg((double)h->data[i] == hw[i] && !signbit(h->data[i]) == !signbit(hw[i]),
                      "h[%d] = %a, numpy's is %a", i, (double)h->data[i], hw[i]);
    for (int i = 0; i < 11; i++)
        ck_assert_msg((double)bf->data[i] == bw[i] && !signbit(bf->data[i]) == !signbit(bw[i]),
                      "bf[%d] = %a, numpy's is %a", i, (double)bf->data[i], bw[i]);
    qkv_params_free(p);
    /* every finite value */
    snprintf(args, sizeof args, "write-half-all '%s'", path);
    free(numpy(args));
    st = qkv_st_open(path, &err);
    ck_assert_msg(st != NULL, "%s", err.message);
    const char *names[2][2] = {{"h", "h_f32"}, {"bf", "bf_f32"}};
    /* less the patterns of exponent 31 (F16: 2 signs · 1024 mantissas) and
     * 255 (BF16: 2 · 128) */
    const size_t count[2] = {65536 - 2048, 65536 - 256};
    for (int k = 0; k < 2; k++) {
        const int i = qkv_st_find(st, names[k][0]), j = qkv_st_find(st, names[k][1]);
        const size_t n = count[k];
        ck_assert_str_eq(qkv_st_dtype(st, i), k == 0 ? "F16" : "BF16");
        ck_assert_str_eq(qkv_st_dtype(st, j), "F32");
        qkv_real *got = malloc(sizeof *got * n), *want = malloc(sizeof *want * n);
        ck_assert(got != NULL && want != NULL);
        ck_assert_int_eq(qkv_st_read(st, i, got, n, &err), QKV_OK);
        ck_assert_int_eq(qkv_st_read(st, j, want, n, &err), QKV_OK);
        for (size_t v = 0; v < n; v++)
            if (got[v] != want[v] || !signbit(got[v]) != !signbit(want[v]))
                ck_abort_msg("%s value %zu = %a, numpy's is %a", names[k][0], v, (double)got[v],
                             (double)want[v]);
        free(got);
        free(want);
    }
    qkv_st_close(st);
}
END_TEST

START_TEST(test_saving_over_a_directory_is_an_io_error)
{
    /* safetensors.h: a path that exists and is not a regular file is
     * QKV_ERR_IO, and is left as it is */
    qkv_params *p = two_params();
    char sub[160];
    snprintf(sub, sizeof sub, "%s/taken", dir);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    qkv_error err = qkv_error_none();
    ck_assert_int_eq(qkv_safetensors_save(p, sub, NULL, 0, &err), QKV_ERR_IO);
    char want[256];
    snprintf(want, sizeof want,
             "%s exists and is not a regular file (a directory); refusing to replace it", sub);
    ck_assert_str_eq(err.message, want);
    struct stat sb;
    ck_assert(stat(sub, &sb) == 0 && S_ISDIR(sb.st_mode));
    ck_assert_int_eq(rmdir(sub), 0);
    qkv_params_free(p);
}
END_TEST

START_TEST(test_opening_a_fifo_or_device_fails_at_once)
{
    /* a named pipe with no writer: open() of it alone would block for ever */
    char fifo[160];
    snprintf(fifo, sizeof fifo, "%s/pipe.safetensors", dir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    qkv_error err = qkv_error_none();
    ck_assert_ptr_null(qkv_st_open(fifo, &err));
    ck_assert_int_eq(err.status, QKV_ERR_IO);
    ck_assert_msg(strstr(err.message, "is not a regular file"), "%s", err.message);
    err = qkv_error_none();
    ck_assert_ptr_null(qkv_st_open("/dev/null", &err));
    ck_assert_msg(strstr(err.message, "/dev/null is not a regular file"), "%s", err.message);
    /* and a directory is named as one */
    err = qkv_error_none();
    ck_assert_ptr_null(qkv_st_open(dir, &err));
    ck_assert_int_eq(err.status, QKV_ERR_IO);
    char want[128];
    snprintf(want, sizeof want, "%s is a directory, not a file", dir);
    ck_assert_str_eq(err.message, want);
}
END_TEST

Suite *safetensors_suite(void)
{
    Suite *s = suite_create("safetensors");
    TCase *tc = tcase_create("safetensors");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_qkv_writes_the_format_byte_for_byte);
    tcase_add_test(tc, test_files_of_other_writers_load);
    tcase_add_test(tc, test_an_empty_tensor_takes_no_bytes);
    tcase_add_test(tc, test_names_and_shapes_at_the_readers_limits);
    tcase_add_test(tc, test_the_header_length_must_fit_the_file_and_the_cap);
    tcase_add_test(tc, test_the_header_must_be_strict_json);
    tcase_add_test(tc, test_header_json_at_its_edges);
    tcase_add_test(tc, test_header_json_grammar_as_cpython_reads_it);
    tcase_add_test(tc, test_each_entry_is_checked);
    tcase_add_test(tc, test_the_tensors_must_tile_the_data);
    tcase_add_test(tc, test_qkv_metadata_is_checked);
    tcase_add_test(tc, test_loading_matches_names_and_shapes);
    tcase_add_test(tc, test_f64_values_that_round_to_the_largest_float_load);
    tcase_add_test(tc, test_reading_one_tensor_gives_its_values);
    tcase_add_test(tc, test_dims_gives_every_dimension_the_file_has);
    tcase_add_test(tc, test_reading_f64_rounds_as_loading_does);
    tcase_add_test(tc, test_reading_refuses_a_wrong_index_count_or_buffer);
    tcase_add_test(tc, test_reading_refuses_a_value_that_is_not_finite);
    tcase_add_test(tc, test_f16_and_bf16_decode_bit_exactly);
    tcase_add_test(tc, test_f16_and_bf16_that_are_not_finite_are_refused);
    tcase_add_test(tc, test_f16_and_bf16_need_two_bytes_a_value);
    tcase_add_test(tc, test_loading_by_path_says_why_it_failed);
    tcase_add_test(tc, test_saving_refuses_bad_metadata_and_values);
    tcase_add_test(tc, test_saving_refuses_metadata_the_reader_would_refuse);
    tcase_add_test(tc, test_saving_takes_a_header_of_exactly_the_cap);
    tcase_add_test(tc, test_saving_follows_the_umask);
    tcase_add_test(tc, test_numpy_reads_what_qkv_writes_and_qkv_what_numpy_writes);
    tcase_add_test(tc, test_numpy_f16_and_bf16_load_as_numpy_converts_them);
    tcase_add_test(tc, test_saving_over_a_directory_is_an_io_error);
    tcase_add_test(tc, test_opening_a_fifo_or_device_fails_at_once);
    suite_add_tcase(s, tc);
    return s;
}
