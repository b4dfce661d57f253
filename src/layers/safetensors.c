/*
 * safetensors.c - saving a parameter list as safetensors, and reading and
 * checking a safetensors file (see safetensors.h for the format and the
 * checks).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers/internal.h"
#include "qkv/safetensors.h"
#include "util/json.h"
#include "util/util.h"

#ifdef QKV_DOUBLE
#define DTYPE "F64"
#else
#define DTYPE "F32"
#endif

#define MAX_NAME 1024 /* bytes of a name or a metadata string */
#define CHUNK 1024    /* values encoded at a time */
#define STR_(x) #x
#define STR(x) STR_(x) /* MAX_NAME as a string, for a message */

/* ------------------------------------------------------------------------ */
/* writing                                                                  */

/* A growing text buffer; bad after a failed allocation. */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    int bad;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->bad)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = qkv_realloc(b->p, cap);
        if (p == NULL) {
            b->bad = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(sbuf *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

/* s as a JSON string, quoted, with ", \ and control characters escaped. */
static void sb_json(sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        char esc[8];
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            snprintf(esc, sizeof esc, "\\%c", c);
        else if (c < 0x20)
            snprintf(esc, sizeof esc, "\\u%04x", c);
        else {
            sb_put(b, s, 1);
            continue;
        }
        sb_str(b, esc);
    }
    sb_put(b, "\"", 1);
}

/* Encodes values j .. j + n - 1 of t little-endian in its dtype into out;
 * returns the bytes written. */
static size_t encode(const qkv_st_tensor *t, size_t j, size_t n, unsigned char *out)
{
    const size_t size = t->f64 != NULL ? 8 : sizeof(qkv_real);
    for (size_t i = 0; i < n; i++) {
        uint64_t u;
        if (t->f64 != NULL) {
            memcpy(&u, &t->f64[j + i], 8);
        } else {
#ifdef QKV_DOUBLE
            memcpy(&u, &t->real[j + i], 8);
#else
            uint32_t w;
            memcpy(&w, &t->real[j + i], 4);
            u = w;
#endif
        }
        for (size_t k = 0; k < size; k++)
            out[size * i + k] = (unsigned char)(u >> (8 * k));
    }
    return n * size;
}

typedef struct writer {
    int n;
    qkv_st_get get;
    const void *ctx;
    const sbuf *header; /* NULL: write nothing but compute the CRC */
    uint32_t crc;
} writer;

/* Every tensor's data as the file stores it, to f and into w->crc (to
 * the CRC alone when f is NULL). */
static void write_data(writer *w, FILE *f)
{
    unsigned char buf[CHUNK * 8];
    w->crc = 0;
    for (int i = 0; i < w->n; i++) {
        qkv_st_tensor t;
        w->get(w->ctx, i, &t);
        for (size_t j = 0; j < t.numel; j += CHUNK) {
            const size_t bytes = encode(&t, j, t.numel - j < CHUNK ? t.numel - j : CHUNK, buf);
            w->crc = qkv_crc32(w->crc, buf, bytes);
            if (f != NULL)
                fwrite(buf, 1, bytes, f);
        }
    }
}

static qkv_status write_file(void *ctx, FILE *f, qkv_error *err)
{
    writer *w = ctx;
    unsigned char len[8];
    (void)err; /* a failed write shows in ferror, which the caller checks */
    for (int k = 0; k < 8; k++)
        len[k] = (unsigned char)((uint64_t)w->header->len >> (8 * k));
    fwrite(len, 1, 8, f);
    fwrite(w->header->p, 1, w->header->len, f);
    write_data(w, f);
    return QKV_OK;
}

/* The tensor of a parameter list: parameter i. */
static void param_tensor(const void *ctx, int i, qkv_st_tensor *out)
{
    const qkv_tensor *t = qkv_params_at(ctx, i, &out->name);
    out->ndim = t->ndim;
    out->shape = t->shape;
    out->real = t->data;
    out->f64 = NULL;
    out->numel = t->numel;
}

qkv_status qkv_safetensors_save(const qkv_params *p, const char *path, const qkv_meta_entry *meta,
                                int n_meta, qkv_error *err)
{
    if (p == NULL || path == NULL || n_meta < 0 || (n_meta > 0 && meta == NULL))
        return qkv_error_set(err, QKV_ERR_ARG, "safetensors: no parameters, path or metadata");
    for (int i = 0; i < n_meta; i++) { /* each refusal says which rule the entry breaks */
        const char *why = NULL;
        if (meta[i].key == NULL || meta[i].value == NULL)
            why = "has no key or no value (NULL)";
        else if (!qkv_utf8_valid(meta[i].key, strlen(meta[i].key), NULL) ||
                 !qkv_utf8_valid(meta[i].value, strlen(meta[i].value), NULL))
            why = "is not UTF-8";
        else if (strlen(meta[i].key) > MAX_NAME || strlen(meta[i].value) > MAX_NAME)
            why = "has a key or value over " STR(MAX_NAME) " bytes, which the reader refuses";
        else if (strncmp(meta[i].key, "qkv_", 4) == 0)
            why = "has a key starting with qkv_, which qkv keeps for its own";
        else if (strcmp(meta[i].key, "__metadata__") == 0)
            why = "has the key __metadata__, the format's own";
        if (why != NULL)
            return qkv_error_set(err, QKV_ERR_ARG,
                                 "safetensors: metadata %d %s; %s was left untouched", i, why,
                                 path);
    }
    for (int i = 1; i < n_meta; i++) /* the reader refuses a repeated key: never write one */
        for (int j = 0; j < i; j++)
            if (strcmp(meta[i].key, meta[j].key) == 0)
                return qkv_error_set(err, QKV_ERR_ARG,
                                     "safetensors: metadata %d repeats the key of metadata %d; "
                                     "%s was left untouched",
                                     i, j, path);
    return qkv_st_write(path, qkv_params_count(p), param_tensor, p, meta, n_meta, err);
}

qkv_status qkv_st_write(const char *path, int n, qkv_st_get get, const void *ctx,
                        const qkv_meta_entry *meta, int n_meta, qkv_error *err)
{
    for (int i = 0; i < n; i++) {
        qkv_st_tensor t;
        get(ctx, i, &t);
        for (size_t j = 0; j < t.numel; j++) {
            const double x = t.f64 != NULL ? t.f64[j] : (double)t.real[j];
            if (!isfinite(x)) {
                char num[32];
                return qkv_error_set(err, QKV_ERR_NUMERIC,
                                     "refusing to save %s: %s[%zu] = %s is not finite; %s was "
                                     "left untouched",
                                     path, t.name, j, qkv_num_str(num, sizeof num, x), path);
            }
        }
    }
    writer w = {n, get, ctx, NULL, 0};
    write_data(&w, NULL);
    sbuf h = {0};
    char num[64];
    snprintf(num, sizeof num, "%08" PRIx32, w.crc);
    sb_str(&h, "{\"__metadata__\":{\"qkv_format\":\"1\",\"qkv_crc32\":");
    sb_json(&h, num);
    for (int i = 0; i < n_meta; i++) {
        sb_str(&h, ",");
        sb_json(&h, meta[i].key);
        sb_str(&h, ":");
        sb_json(&h, meta[i].value);
    }
    sb_str(&h, "}");
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        qkv_st_tensor t;
        get(ctx, i, &t);
        sb_str(&h, ",");
        sb_json(&h, t.name);
        sb_str(&h, t.f64 != NULL ? ":{\"dtype\":\"F64\",\"shape\":["
                                 : ":{\"dtype\":\"" DTYPE "\",\"shape\":[");
        for (int d = 0; d < t.ndim; d++) {
            snprintf(num, sizeof num, d ? ",%d" : "%d", t.shape[d]);
            sb_str(&h, num);
        }
        const uint64_t bytes = (uint64_t)t.numel * (t.f64 != NULL ? 8 : sizeof(qkv_real));
        snprintf(num, sizeof num, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", at, at + bytes);
        sb_str(&h, num);
        at += bytes;
    }
    sb_str(&h, "}");
    while (!h.bad && (8 + h.len) % 8 != 0) /* align the data to 8 bytes, as others do */
        sb_str(&h, " ");
    qkv_status s = QKV_OK;
    if (h.bad) {
        s = qkv_error_set(err, QKV_ERR_NOMEM, "safetensors: out of memory for the header");
    } else if (h.len > QKV_SAFETENSORS_MAX_HEADER) { /* which the reader would refuse */
        s = qkv_error_set(err, QKV_ERR_ARG,
                          "safetensors: a header of %zu bytes is over the limit of %u; %s was "
                          "left untouched",
                          h.len, QKV_SAFETENSORS_MAX_HEADER, path);
    } else {
        w.header = &h;
        s = qkv_save_atomic(path, write_file, &w, err);
    }
    free(h.p);
    return s;
}

/* ------------------------------------------------------------------------ */
/* reading                                                                  */

/* The dtypes the reader takes, by their names in the format; a value's
 * bytes are little-endian. F16 is IEEE binary16 (a sign, 5 bits of
 * exponent, 10 of mantissa) and BF16 the high 16 bits of a float32: every
 * value of either is a float exactly, so the reader converts them with no
 * rounding. */
typedef enum st_dtype { ST_F16, ST_BF16, ST_F32, ST_F64 } st_dtype;

static const struct {
    const char *name;
    int size; /* bytes a value */
} dtypes[] = {{"F16", 2}, {"BF16", 2}, {"F32", 4}, {"F64", 8}};

typedef struct entry {
    char *name;
    st_dtype dtype;
    int dtype_size; /* dtypes[dtype].size: 2, 4 or 8 */
    int ndim;
    uint64_t shape[QKV_ST_MAX_DIMS];
    uint64_t begin, end; /* into the data */
} entry;

struct qkv_st {
    char *label;          /* the path or name, for messages */
    unsigned char *bytes; /* (len) the whole file */
    size_t len, data_at;  /* the data starts at bytes + data_at */
    entry *e;             /* (n) in file order */
    int n;
    char **meta; /* (2·n_meta) keys and values */
    int n_meta;
};

void qkv_st_close(qkv_st *f)
{
    if (f == NULL)
        return;
    for (int i = 0; i < f->n; i++)
        free(f->e[i].name);
    for (int i = 0; i < 2 * f->n_meta; i++)
        free(f->meta[i]);
    free(f->e);
    free(f->meta);
    free(f->bytes);
    free(f->label);
    free(f);
}

/* A copy of string token i in *out: QKV_ERR_FORMAT for one too long or
 * holding a NUL, QKV_ERR_NOMEM when the copy cannot be allocated (*out
 * NULL for both). */
static qkv_status dup_string(const qkv_json *j, int i, char **out)
{
    char buf[MAX_NAME + 1];
    *out = NULL;
    long n = qkv_json_string(j, i, buf, sizeof buf);
    if (n < 0)
        return QKV_ERR_FORMAT;
    if ((*out = qkv_malloc((size_t)n + 1)) == NULL)
        return QKV_ERR_NOMEM;
    memcpy(*out, buf, (size_t)n + 1);
    return QKV_OK;
}

/* Reads the "__metadata__" object at token v. */
static qkv_status read_meta(qkv_st *f, const qkv_json *j, int v, qkv_error *err)
{
    if (j->tok[v].kind != QKV_JSON_OBJECT)
        return qkv_error_set(err, QKV_ERR_FORMAT, "%s: __metadata__ must be an object", f->label);
    f->meta = qkv_calloc(2 * (size_t)j->tok[v].size + 1, sizeof *f->meta);
    if (f->meta == NULL)
        return qkv_error_set(err, QKV_ERR_NOMEM, "%s: out of memory", f->label);
    for (int k = v + 1, m = 0; m < j->tok[v].size; m++, k = j->tok[k + 1].next) {
        if (j->tok[k + 1].kind != QKV_JSON_STRING)
            return qkv_error_set(err, QKV_ERR_FORMAT,
                                 "%s: __metadata__ values must be strings (byte %zu)", f->label,
                                 8 + j->tok[k + 1].start);
        qkv_status s = dup_string(j, k, &f->meta[2 * m]);
        if (s == QKV_OK)
            s = dup_string(j, k + 1, &f->meta[2 * m + 1]);
        f->n_meta = m + 1;
        if (s == QKV_ERR_NOMEM)
            return qkv_error_set(err, s, "%s: out of memory", f->label);
        if (s != QKV_OK)
            return qkv_error_set(err, s,
                                 "%s: a __metadata__ string is too long or holds a NUL (byte %zu)",
                                 f->label, 8 + j->tok[k].start);
    }
    return QKV_OK;
}

/* Reads the array of unsigned integers at token a into out (at most max);
 * the count, or -1. */
static int read_uints(const qkv_json *j, int a, uint64_t *out, int max)
{
    if (j->tok[a].kind != QKV_JSON_ARRAY || j->tok[a].size > max)
        return -1;
    for (int k = 0; k < j->tok[a].size; k++)
        if (qkv_json_uint(j, a + 1 + k, &out[k]) != 0)
            return -1;
    return j->tok[a].size;
}

/* Reads tensor entry e (name already set) from the object at token v. */
static qkv_status read_entry(qkv_st *f, const qkv_json *j, int v, entry *e, qkv_error *err)
{
    const char *lab = f->label, *name = e->name;
    if (j->tok[v].kind != QKV_JSON_OBJECT)
        return qkv_error_set(err, QKV_ERR_FORMAT, "%s: tensor '%s' must be an object", lab, name);
    int seen = 0;
    for (int k = v + 1, m = 0; m < j->tok[v].size; m++, k = j->tok[k + 1].next) {
        if (qkv_json_string_is(j, k, "dtype")) {
            seen |= 1;
            int t = 0;
            while (t < (int)(sizeof dtypes / sizeof dtypes[0]) &&
                   !qkv_json_string_is(j, k + 1, dtypes[t].name))
                t++;
            if (t == (int)(sizeof dtypes / sizeof dtypes[0])) {
                char d[32];
                if (qkv_json_string(j, k + 1, d, sizeof d) < 0)
                    snprintf(d, sizeof d, "?");
                return qkv_error_set(err, QKV_ERR_FORMAT,
                                     "%s: tensor '%s' has dtype '%s'; qkv reads F16, BF16, F32 "
                                     "and F64",
                                     lab, name, d);
            }
            e->dtype = (st_dtype)t;
            e->dtype_size = dtypes[t].size;
        } else if (qkv_json_string_is(j, k, "shape")) {
            seen |= 2;
            e->ndim = read_uints(j, k + 1, e->shape, QKV_ST_MAX_DIMS);
            if (e->ndim < 0)
                return qkv_error_set(err, QKV_ERR_FORMAT,
                                     "%s: tensor '%s' needs a shape of at most %d whole numbers",
                                     lab, name, QKV_ST_MAX_DIMS);
        } else if (qkv_json_string_is(j, k, "data_offsets")) {
            uint64_t off[2];
            seen |= 4;
            if (read_uints(j, k + 1, off, 2) != 2)
                return qkv_error_set(err, QKV_ERR_FORMAT,
                                     "%s: tensor '%s' needs data_offsets [begin, end], two whole "
                                     "numbers of at most 2^53",
                                     lab, name);
            if (off[0] > off[1])
                return qkv_error_set(err, QKV_ERR_FORMAT,
                                     "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                                     "] end before they begin",
                                     lab, name, off[0], off[1]);
            e->begin = off[0];
            e->end = off[1];
        } else {
            return qkv_error_set(err, QKV_ERR_FORMAT,
                                 "%s: tensor '%s' has an unknown field "
                                 "(byte %zu)",
                                 lab, name, 8 + j->tok[k].start);
        }
    }
    if (seen != 7)
        return qkv_error_set(err, QKV_ERR_FORMAT,
                             "%s: tensor '%s' needs dtype, shape and data_offsets", lab, name);
    uint64_t n = (uint64_t)e->dtype_size;
    for (int d = 0; d < e->ndim; d++) {
        if (e->shape[d] != 0 && n > UINT64_MAX / e->shape[d])
            return qkv_error_set(err, QKV_ERR_FORMAT,
                                 "%s: tensor '%s': the size of its shape "
                                 "overflows",
                                 lab, name);
        n *= e->shape[d];
    }
    if (e->end - e->begin != n)
        return qkv_error_set(err, QKV_ERR_FORMAT,
                             "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                             "] hold %" PRIu64 " bytes, its dtype and shape need %" PRIu64,
                             lab, name, e->begin, e->end, e->end - e->begin, n);
    return QKV_OK;
}

/* By where the data begins, and an empty tensor ([k, k]) before one that
 * begins at k too: it takes no bytes, whichever the header names first. */
static int by_begin(const void *a, const void *b)
{
    const entry *x = *(entry *const *)a, *y = *(entry *const *)b;
    if (x->begin != y->begin)
        return (x->begin > y->begin) - (x->begin < y->begin);
    return (x->end > y->end) - (x->end < y->end);
}

/* The tensors must tile the data exactly: from 0, each starting where the
 * one before ends, the last ending at the end of the file. */
static qkv_status check_tiling(qkv_st *f, qkv_error *err)
{
    const uint64_t data = f->len - f->data_at;
    entry **order = qkv_malloc(sizeof *order * ((size_t)f->n + 1));
    if (order == NULL)
        return qkv_error_set(err, QKV_ERR_NOMEM, "%s: out of memory", f->label);
    for (int i = 0; i < f->n; i++)
        order[i] = &f->e[i];
    qsort(order, (size_t)f->n, sizeof *order, by_begin);
    uint64_t at = 0;
    qkv_status s = QKV_OK;
    for (int i = 0; i < f->n && s == QKV_OK; i++) {
        const entry *e = order[i];
        if (e->begin > at)
            s = qkv_error_set(err, QKV_ERR_FORMAT,
                              "%s: %" PRIu64 " %s of the data at byte %" PRIu64
                              " belong%s to no tensor (a hole before '%s'; one missing from "
                              "the header?)",
                              f->label, e->begin - at, e->begin - at == 1 ? "byte" : "bytes",
                              f->data_at + at, e->begin - at == 1 ? "s" : "", e->name);
        else if (e->begin < at)
            s = qkv_error_set(
                err, QKV_ERR_FORMAT,
                "%s: tensor '%s' overlaps the one before it (its data begins at %" PRIu64
                ", the previous ends at %" PRIu64 ")",
                f->label, e->name, e->begin, at);
        else if (e->end > data)
            s = qkv_error_set(err, QKV_ERR_FORMAT,
                              "%s: tensor '%s' ends at data byte %" PRIu64
                              ", past the end of the file's %" PRIu64 " bytes of data",
                              f->label, e->name, e->end, data);
        at = e->end;
    }
    if (s == QKV_OK && at != data)
        s = qkv_error_set(err, QKV_ERR_FORMAT,
                          "%s: %" PRIu64 " %s after the last tensor (at byte %" PRIu64
                          ") belong%s to no tensor (one missing from the header?)",
                          f->label, data - at, data - at == 1 ? "byte" : "bytes", f->data_at + at,
                          data - at == 1 ? "s" : "");
    free(order);
    return s;
}

/* qkv's own metadata: a format this qkv reads, and a matching CRC. */
static qkv_status check_qkv_meta(qkv_st *f, qkv_error *err)
{
    const char *fmt = qkv_st_meta(f, "qkv_format"), *crc = qkv_st_meta(f, "qkv_crc32");
    if (fmt != NULL) {
        char *end;
        long v = strtol(fmt, &end, 10);
        if (*fmt < '0' || *fmt > '9' || *end != '\0' || v < 1)
            return qkv_error_set(err, QKV_ERR_FORMAT, "%s: a damaged qkv_format", f->label);
        if (v > QKV_SAFETENSORS_FORMAT)
            return qkv_error_set(err, QKV_ERR_FORMAT,
                                 "%s has qkv format %ld; this qkv reads format %d (upgrade qkv)",
                                 f->label, v, QKV_SAFETENSORS_FORMAT);
    }
    if (crc != NULL) {
        uint32_t want = 0;
        size_t k = 0;
        for (; crc[k] && k < 9; k++) {
            int h = crc[k] >= '0' && crc[k] <= '9'   ? crc[k] - '0'
                    : crc[k] >= 'a' && crc[k] <= 'f' ? crc[k] - 'a' + 10
                                                     : -1;
            if (h < 0)
                break;
            want = want << 4 | (uint32_t)h;
        }
        if (k != 8 || crc[k] != '\0')
            return qkv_error_set(err, QKV_ERR_FORMAT, "%s: a damaged qkv_crc32", f->label);
        if (qkv_crc32(0, f->bytes + f->data_at, f->len - f->data_at) != want)
            return qkv_error_set(err, QKV_ERR_FORMAT, "%s is corrupted: checksum mismatch",
                                 f->label);
    }
    return QKV_OK;
}

/* Checks the header and framing of f->bytes. */
static qkv_status check_file(qkv_st *f, qkv_error *err)
{
    if (f->len < 8)
        return qkv_error_set(err, QKV_ERR_FORMAT, "%s is not a safetensors file: %zu bytes",
                             f->label, f->len);
    uint64_t n = 0;
    for (int k = 7; k >= 0; k--)
        n = n << 8 | f->bytes[k];
    if (n == 0)
        return qkv_error_set(err, QKV_ERR_FORMAT,
                             "%s is not a safetensors file: its header length is 0 (a header "
                             "is a JSON object, at least {})",
                             f->label);
    if (n > f->len - 8)
        return qkv_error_set(
            err, QKV_ERR_FORMAT,
            "%s is not a safetensors file, or is truncated: its header length %" PRIu64
            " goes past the end of the file (%zu bytes)",
            f->label, n, f->len);
    if (n > QKV_SAFETENSORS_MAX_HEADER)
        return qkv_error_set(err, QKV_ERR_FORMAT,
                             "%s: a header of %" PRIu64 " bytes is over "
                             "the limit of %u",
                             f->label, n, QKV_SAFETENSORS_MAX_HEADER);
    f->data_at = 8 + (size_t)n;
    qkv_json j;
    qkv_error jerr = qkv_error_none();
    /* a real header has a value per 4 bytes at the most (a tensor's entry is
     * some 50 bytes for 10 values), so this bounds the parser's memory */
    if (qkv_json_parse(&j, (const char *)f->bytes + 8, (size_t)n, (int)(n / 3 + 16), &jerr) !=
        QKV_OK)
        return qkv_error_set(err, jerr.status, "%s: the header's %s (counting from byte 8)",
                             f->label, jerr.message);
    qkv_status s = QKV_OK;
    if (j.tok[0].kind != QKV_JSON_OBJECT)
        s = qkv_error_set(err, QKV_ERR_FORMAT, "%s: the header must be a JSON object", f->label);
    else if ((f->e = qkv_calloc((size_t)j.tok[0].size + 1, sizeof *f->e)) == NULL)
        s = qkv_error_set(err, QKV_ERR_NOMEM, "%s: out of memory", f->label);
    for (int k = 1, m = 0; s == QKV_OK && m < j.tok[0].size; m++, k = j.tok[k + 1].next) {
        if (qkv_json_string_is(&j, k, "__metadata__")) {
            s = read_meta(f, &j, k + 1, err);
            continue;
        }
        entry *e = &f->e[f->n];
        if ((s = dup_string(&j, k, &e->name)) != QKV_OK) {
            if (s == QKV_ERR_NOMEM)
                qkv_error_set(err, s, "%s: out of memory", f->label);
            else
                qkv_error_set(err, s, "%s: a tensor name is too long or holds a NUL (byte %zu)",
                              f->label, 8 + j.tok[k].start);
            break;
        }
        f->n++;
        s = read_entry(f, &j, k + 1, e, err);
    }
    qkv_json_free(&j);
    if (s == QKV_OK)
        s = check_tiling(f, err);
    if (s == QKV_OK)
        s = check_qkv_meta(f, err);
    return s;
}

/* An st for label owning bytes (freed on failure). */
static qkv_st *checked(unsigned char *bytes, size_t len, const char *label, qkv_error *err)
{
    qkv_st *f = qkv_calloc(1, sizeof *f);
    size_t ll = strlen(label);
    char *lab = qkv_malloc(ll + 1);
    if (f == NULL || lab == NULL) {
        free(f);
        free(lab);
        free(bytes);
        qkv_error_set(err, QKV_ERR_NOMEM, "%s: out of memory", label);
        return NULL;
    }
    memcpy(lab, label, ll + 1);
    f->label = lab;
    f->bytes = bytes;
    f->len = len;
    if (check_file(f, err) != QKV_OK) {
        qkv_st_close(f);
        return NULL;
    }
    return f;
}

qkv_st *qkv_st_open(const char *path, qkv_error *err)
{
    size_t len;
    if (path == NULL) {
        qkv_error_set(err, QKV_ERR_ARG, "safetensors: no path");
        return NULL;
    }
    unsigned char *bytes = qkv_read_file(path, QKV_SAFETENSORS_MAX_FILE, &len, err);
    return bytes != NULL ? checked(bytes, len, path, err) : NULL;
}

qkv_st *qkv_st_parse(const void *data, size_t len, const char *name, qkv_error *err)
{
    if (data == NULL || name == NULL) {
        qkv_error_set(err, QKV_ERR_ARG, "safetensors: no data or no name");
        return NULL;
    }
    unsigned char *copy = qkv_malloc(len ? len : 1);
    if (copy == NULL) {
        qkv_error_set(err, QKV_ERR_NOMEM, "%s: out of memory", name);
        return NULL;
    }
    memcpy(copy, data, len);
    return checked(copy, len, name, err);
}

const char *qkv_st_meta(const qkv_st *f, const char *key)
{
    for (int i = 0; f != NULL && key != NULL && i < f->n_meta; i++)
        if (strcmp(f->meta[2 * i], key) == 0)
            return f->meta[2 * i + 1];
    return NULL;
}

int qkv_st_meta_count(const qkv_st *f)
{
    return f != NULL ? f->n_meta : 0;
}

const char *qkv_st_meta_key(const qkv_st *f, int i)
{
    return f != NULL && i >= 0 && i < f->n_meta ? f->meta[2 * i] : NULL;
}

int qkv_st_count(const qkv_st *f)
{
    return f != NULL ? f->n : 0;
}

const char *qkv_st_name(const qkv_st *f, int i)
{
    return f != NULL && i >= 0 && i < f->n ? f->e[i].name : NULL;
}

const char *qkv_st_dtype(const qkv_st *f, int i)
{
    if (f == NULL || i < 0 || i >= f->n)
        return NULL;
    return dtypes[f->e[i].dtype].name;
}

int qkv_st_shape(const qkv_st *f, int i, int shape[QKV_MAX_DIMS])
{
    if (f == NULL || shape == NULL || i < 0 || i >= f->n || f->e[i].ndim > QKV_MAX_DIMS)
        return -1;
    for (int d = 0; d < f->e[i].ndim; d++) {
        if (f->e[i].shape[d] > 0x7fffffff)
            return -1;
        shape[d] = (int)f->e[i].shape[d];
    }
    return f->e[i].ndim;
}

int qkv_st_dims(const qkv_st *f, int i, uint64_t *dims, int cap)
{
    if (f == NULL || i < 0 || i >= f->n)
        return -1;
    for (int d = 0; d < f->e[i].ndim && d < cap; d++)
        dims[d] = f->e[i].shape[d];
    return f->e[i].ndim;
}

int qkv_st_find(const qkv_st *f, const char *name)
{
    for (int i = 0; f != NULL && name != NULL && i < f->n; i++)
        if (strcmp(f->e[i].name, name) == 0)
            return i;
    return -1;
}

/* The entry named name, or NULL. */
static const entry *find(const qkv_st *f, const char *name)
{
    const int i = qkv_st_find(f, name);
    return i >= 0 ? &f->e[i] : NULL;
}

/* The value of F16 bits h, exactly: (-1)^sign · mantissa · 2^(exponent -
 * 25) with the implicit 1 (1024) for a normal exponent (1 to 30), mantissa
 * · 2^-24 for a subnormal (exponent 0, ±0 among them), and ±infinity or NaN
 * for exponent 31. */
static double f16_value(uint32_t h)
{
    const uint32_t exponent = h >> 10 & 0x1f, mantissa = h & 0x3ff;
    double v;
    if (exponent == 0x1f)
        v = mantissa != 0 ? NAN : INFINITY;
    else if (exponent == 0)
        v = ldexp(mantissa, -24);
    else
        v = ldexp(mantissa | 0x400, (int)exponent - 25);
    return h & 0x8000 ? -v : v;
}

/* The float whose bits are u. */
static float f32_value(uint32_t u)
{
    float v;
    memcpy(&v, &u, 4);
    return v;
}

/* Value k of entry e, decoded from its little-endian dtype. */
static double value_at(const qkv_st *f, const entry *e, size_t k)
{
    const unsigned char *b = f->bytes + f->data_at + e->begin + k * (size_t)e->dtype_size;
    uint64_t u = 0;
    for (int i = e->dtype_size - 1; i >= 0; i--)
        u = u << 8 | b[i];
    switch (e->dtype) {
    case ST_F16: return f16_value((uint32_t)u);
    case ST_BF16: /* the high half of a float32 */ return f32_value((uint32_t)u << 16);
    case ST_F32: return f32_value((uint32_t)u);
    case ST_F64: break;
    }
    double v;
    memcpy(&v, &u, 8);
    return v;
}

/* The number of values of entry e (its shape's product: the checks of
 * read_entry made its bytes that many values). */
static size_t entry_numel(const entry *e)
{
    return (size_t)((e->end - e->begin) / (uint64_t)e->dtype_size);
}

size_t qkv_st_numel(const qkv_st *f, int i)
{
    return f != NULL && i >= 0 && i < f->n ? entry_numel(&f->e[i]) : 0;
}

/* Checks that every value of entry e becomes a finite qkv_real: finite in
 * the file (an F16 or BF16 one as an F32 one: not ±infinity nor NaN) and,
 * for an F64 value in a float build, not rounding to infinity. */
static qkv_status check_values(const qkv_st *f, const entry *e, qkv_error *err)
{
    const size_t n = entry_numel(e);
    for (size_t k = 0; k < n; k++) {
        double v = value_at(f, e, k);
        char num[32];
        if (!isfinite(v))
            return qkv_error_set(err, QKV_ERR_NUMERIC,
                                 "%s: tensor '%s' value %zu is %s, not a finite number", f->label,
                                 e->name, k, qkv_num_str(num, sizeof num, v));
        /* only an F64 value can be beyond F32's range, and only a float
         * build's weights are F32: the file is most likely a double
         * build's. Beyond means rounding to infinity: from the midpoint
         * between FLT_MAX (0x1.fffffep+127) and 2^128 on, a tie going to
         * the even 2^128; below it, FLT_MAX */
        if (sizeof(qkv_real) == 4 && fabs(v) >= 0x1.ffffffp+127)
            return qkv_error_set(err, QKV_ERR_NUMERIC,
                                 "%s: tensor '%s' value %zu (%g) is beyond F32's range: this "
                                 "build reads F32 weights; the file holds F64, as a double "
                                 "build (make DOUBLE=1) writes and reads",
                                 f->label, e->name, k, v);
    }
    return QKV_OK;
}

/* Entry e's values into out, as qkv_real (an F64 value rounded to nearest
 * in a float build; F16, BF16 and F32 ones exactly); check_values first. */
static void convert_values(const qkv_st *f, const entry *e, qkv_real *out)
{
    const size_t n = entry_numel(e);
    for (size_t k = 0; k < n; k++)
        out[k] = (qkv_real)value_at(f, e, k);
}

qkv_status qkv_st_load(const qkv_st *f, qkv_params *p, qkv_error *err)
{
    if (f == NULL || p == NULL)
        return qkv_error_set(err, QKV_ERR_ARG, "safetensors: no file or no parameters");
    /* first every check, then the copy: an error changes nothing */
    for (int i = 0; i < qkv_params_count(p); i++) {
        const char *name;
        const qkv_tensor *t = qkv_params_at(p, i, &name);
        const entry *e = find(f, name);
        if (e == NULL)
            return qkv_error_set(err, QKV_ERR_FORMAT, "%s has no tensor '%s'", f->label, name);
        int same = e->ndim == t->ndim;
        for (int d = 0; same && d < t->ndim; d++)
            same = e->shape[d] == (uint64_t)t->shape[d];
        if (!same) {
            char want[64], got[128] = "[";
            qkv_shape_str(t, want, sizeof want);
            for (int d = 0; d < e->ndim; d++)
                snprintf(got + strlen(got), sizeof got - strlen(got), d ? ",%" PRIu64 : "%" PRIu64,
                         e->shape[d]);
            snprintf(got + strlen(got), sizeof got - strlen(got), "]");
            return qkv_error_set(err, QKV_ERR_SHAPE, "%s: tensor '%s' is %s, the model's is %s",
                                 f->label, name, got, want);
        }
        qkv_status s = check_values(f, e, err);
        if (s != QKV_OK)
            return s;
    }
    for (int i = 0; i < f->n; i++)
        if (qkv_params_get(p, f->e[i].name) == NULL)
            return qkv_error_set(err, QKV_ERR_FORMAT,
                                 "%s has tensor '%s', which the model does not have", f->label,
                                 f->e[i].name);
    for (int i = 0; i < qkv_params_count(p); i++) {
        const char *name;
        qkv_tensor *t = qkv_params_at(p, i, &name);
        convert_values(f, find(f, name), t->data);
    }
    return QKV_OK;
}

/* The entry that a read of n values from tensor i of f into out (NULL or
 * not) takes, or NULL with err saying why: no file, no such tensor, no
 * buffer or another count. For qkv_st_read and qkv_st_read_f64. */
static const entry *entry_to_read(const qkv_st *f, int i, const void *out, size_t n, qkv_error *err)
{
    if (f == NULL) {
        qkv_error_set(err, QKV_ERR_ARG, "safetensors: no file (NULL)");
        return NULL;
    }
    if (i < 0 || i >= f->n) {
        if (f->n == 0)
            qkv_error_set(err, QKV_ERR_ARG, "%s has no tensor %d: it has none", f->label, i);
        else
            qkv_error_set(err, QKV_ERR_ARG, "%s has no tensor %d: its tensors are 0 to %d",
                          f->label, i, f->n - 1);
        return NULL;
    }
    const entry *e = &f->e[i];
    if (out == NULL) {
        qkv_error_set(err, QKV_ERR_ARG, "%s: tensor '%s': no buffer for its values (NULL)",
                      f->label, e->name);
        return NULL;
    }
    if (n != entry_numel(e)) {
        qkv_error_set(err, QKV_ERR_ARG, "%s: tensor '%s' has %zu values, not the %zu asked for",
                      f->label, e->name, entry_numel(e), n);
        return NULL;
    }
    return e;
}

qkv_status qkv_st_read(const qkv_st *f, int i, qkv_real *out, size_t n, qkv_error *err)
{
    const entry *e = entry_to_read(f, i, out, n, err);
    if (e == NULL)
        return QKV_ERR_ARG;
    qkv_status s = check_values(f, e, err);
    if (s == QKV_OK)
        convert_values(f, e, out);
    return s;
}

qkv_status qkv_st_read_f64(const qkv_st *f, int i, double *out, size_t n, qkv_error *err)
{
    const entry *e = entry_to_read(f, i, out, n, err);
    if (e == NULL)
        return QKV_ERR_ARG;
    if (e->dtype != ST_F64)
        return qkv_error_set(err, QKV_ERR_FORMAT, "%s: tensor '%s' is %s, not the F64 it needs",
                             f->label, e->name, dtypes[e->dtype].name);
    for (size_t k = 0; k < n; k++) { /* finite; no F32 range: a double build's or not */
        char num[32];
        const double v = value_at(f, e, k);
        if (!isfinite(v))
            return qkv_error_set(err, QKV_ERR_NUMERIC,
                                 "%s: tensor '%s' value %zu is %s, not a finite number", f->label,
                                 e->name, k, qkv_num_str(num, sizeof num, v));
    }
    for (size_t k = 0; k < n; k++)
        out[k] = value_at(f, e, k);
    return QKV_OK;
}

qkv_status qkv_safetensors_load(qkv_params *p, const char *path, qkv_error *err)
{
    qkv_error local = qkv_error_none();
    qkv_st *f = qkv_st_open(path, &local);
    qkv_status s = f != NULL ? qkv_st_load(f, p, &local) : local.status;
    qkv_st_close(f);
    if (s != QKV_OK && err != NULL)
        *err = local;
    return s;
}
