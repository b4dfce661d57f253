/*
 * checkpoint.c - the coreference model's checkpoint: encode, save
 * atomically, load and check (see checkpoint.h for the layout).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "apps/coref/checkpoint.h"
#include "util/util.h"

#define MAGIC "QKVMODEL"
#define HEADER_BYTES (8 + 4 + 8 + 4 + 4 * 4 + 8 + 8 + 4)
#define MAX_FILE (256u << 20)

/* ------------------------------------------------------------------------ */
/* little-endian buffer                                                     */

typedef struct buf {
    unsigned char *p;
    size_t len, cap, pos; /* pos: read cursor */
    int bad;              /* a write failed or a read ran past the end */
} buf;

static void put(buf *b, const void *src, size_t n)
{
    if (b->bad || b->len + n > b->cap) {
        b->bad = 1;
        return;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void put_u32(buf *b, uint32_t v)
{
    unsigned char x[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    put(b, x, 4);
}

static void put_u64(buf *b, uint64_t v)
{
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}

static void put_f64(buf *b, double d)
{
    uint64_t v;
    memcpy(&v, &d, 8);
    put_u64(b, v);
}

static uint32_t get_u32(buf *b)
{
    if (b->bad || b->pos + 4 > b->len) {
        b->bad = 1;
        return 0;
    }
    const unsigned char *x = b->p + b->pos;
    b->pos += 4;
    return (uint32_t)x[0] | (uint32_t)x[1] << 8 | (uint32_t)x[2] << 16 | (uint32_t)x[3] << 24;
}

static uint64_t get_u64(buf *b)
{
    uint64_t lo = get_u32(b);
    return lo | (uint64_t)get_u32(b) << 32;
}

static double get_f64(buf *b)
{
    uint64_t v = get_u64(b);
    double d;
    memcpy(&d, &v, 8);
    return d;
}

/* ------------------------------------------------------------------------ */
/* save                                                                     */

static size_t checkpoint_size(const qkv_coref_model *m)
{
    size_t n = HEADER_BYTES + 4; /* + crc */
    for (int i = 0; i < QKV_COREF_PARAMS; i++)
        n += 4 + 4 * (size_t)m->params[i]->ndim + 4 * m->params[i]->numel;
    return n;
}

static void encode(const qkv_coref_model *m, uint32_t fingerprint, buf *b)
{
    put(b, MAGIC, 8);
    put_u32(b, QKV_COREF_CHECKPOINT_VERSION);
    put_u64(b, b->cap);
    put_u32(b, fingerprint);
    put_u32(b, (uint32_t)m->cfg.vocab);
    put_u32(b, (uint32_t)m->cfg.d_k);
    put_u32(b, (uint32_t)m->cfg.classes);
    put_u32(b, (uint32_t)m->cfg.scaled);
    put_f64(b, m->cfg.init_std);
    put_u64(b, m->cfg.seed);
    put_u32(b, QKV_COREF_PARAMS);
    for (int i = 0; i < QKV_COREF_PARAMS; i++) {
        const qkv_tensor *t = m->params[i];
        put_u32(b, (uint32_t)t->ndim);
        for (int d = 0; d < t->ndim; d++)
            put_u32(b, (uint32_t)t->shape[d]);
        for (size_t j = 0; j < t->numel; j++) {
            float f = (float)t->data[j];
            uint32_t v;
            memcpy(&v, &f, 4);
            put_u32(b, v);
        }
    }
    put_u32(b, qkv_crc32(0, b->p, b->len));
}

qkv_status qkv_coref_save(const qkv_coref_model *m, uint32_t fingerprint, const char *path,
                          qkv_error *err)
{
    buf b = {NULL, 0, checkpoint_size(m), 0, 0};
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return qkv_error_set(err, QKV_ERR_IO, "%s: path too long", path);
    if ((b.p = qkv_malloc(b.cap)) == NULL)
        return qkv_error_set(err, QKV_ERR_NOMEM, "%s: out of memory", path);
    encode(m, fingerprint, &b);
    FILE *f = fopen(tmp, "wb");
    int ok = f != NULL && !b.bad && fwrite(b.p, 1, b.len, f) == b.len && fflush(f) == 0 &&
             fsync(fileno(f)) == 0;
    int saved = errno;
    if (f != NULL && fclose(f) != 0)
        ok = 0;
    free(b.p);
    if (!ok || rename(tmp, path) != 0) {
        saved = ok ? errno : saved;
        remove(tmp);
        return qkv_error_set(err, QKV_ERR_IO, "cannot write %s: %s", path, strerror(saved));
    }
    return QKV_OK;
}

/* ------------------------------------------------------------------------ */
/* load                                                                     */

/* Reads the whole file; NULL with a message for a missing path, a
 * directory, an empty or oversized file. */
static unsigned char *read_file(const char *path, size_t *len, qkv_error *err)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        qkv_error_set(err, QKV_ERR_IO, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    if (S_ISDIR(sb.st_mode)) {
        qkv_error_set(err, QKV_ERR_IO, "%s is a directory, not a checkpoint", path);
        return NULL;
    }
    if (sb.st_size == 0) {
        qkv_error_set(err, QKV_ERR_FORMAT, "%s is empty, not a checkpoint", path);
        return NULL;
    }
    if ((uintmax_t)sb.st_size > MAX_FILE) {
        qkv_error_set(err, QKV_ERR_FORMAT, "%s is too large to be a checkpoint", path);
        return NULL;
    }
    FILE *f = fopen(path, "rb");
    unsigned char *p = qkv_malloc((size_t)sb.st_size);
    size_t n = (f != NULL && p != NULL) ? fread(p, 1, (size_t)sb.st_size, f) : 0;
    if (f != NULL)
        fclose(f);
    if (n != (size_t)sb.st_size) {
        free(p);
        qkv_error_set(err, QKV_ERR_IO, "cannot read %s", path);
        return NULL;
    }
    *len = n;
    return p;
}

/* Reads one tensor's shape and data into t, which must have that shape. */
static int decode_tensor(buf *b, qkv_tensor *t)
{
    if (get_u32(b) != (uint32_t)t->ndim)
        return 0;
    for (int d = 0; d < t->ndim; d++)
        if (get_u32(b) != (uint32_t)t->shape[d])
            return 0;
    for (size_t j = 0; j < t->numel && !b->bad; j++) {
        uint32_t v = get_u32(b);
        float f;
        memcpy(&f, &v, 4);
        if (!isfinite(f))
            return 0;
        t->data[j] = (qkv_real)f;
    }
    return !b->bad;
}

static qkv_coref_model *decode(buf *b, const char *path, uint32_t fingerprint, qkv_error *err)
{
    if (b->len < HEADER_BYTES + 4 || memcmp(b->p, MAGIC, 8) != 0) {
        qkv_error_set(err, QKV_ERR_FORMAT, "%s is not a qkv checkpoint (%s)", path,
                      memcmp(b->p, MAGIC, b->len < 8 ? b->len : 8) ? "wrong magic bytes"
                                                                   : "too short");
        return NULL;
    }
    b->pos = 8;
    uint32_t version = get_u32(b);
    uint64_t size = get_u64(b);
    if (version == 0 || version > QKV_COREF_CHECKPOINT_VERSION) {
        qkv_error_set(err, QKV_ERR_FORMAT,
                      version ? "%s has format version %u; this qkv reads version %u (upgrade qkv)"
                              : "%s is damaged: format version %u (this qkv reads version %u)",
                      path, version, QKV_COREF_CHECKPOINT_VERSION);
        return NULL;
    }
    if (size != b->len) {
        qkv_error_set(err, QKV_ERR_FORMAT, "%s is %s: %zu bytes, the header says %llu", path,
                      b->len < size ? "truncated" : "damaged", b->len, (unsigned long long)size);
        return NULL;
    }
    b->pos = b->len - 4;
    if (get_u32(b) != qkv_crc32(0, b->p, b->len - 4)) {
        qkv_error_set(err, QKV_ERR_FORMAT, "%s is corrupted: checksum mismatch", path);
        return NULL;
    }
    b->pos = 8 + 4 + 8;
    uint32_t fp = get_u32(b);
    if (fp != fingerprint) {
        qkv_error_set(err, QKV_ERR_FORMAT,
                      "%s was trained on another vocabulary (fingerprint %08x, this build %08x)",
                      path, fp, fingerprint);
        return NULL;
    }
    qkv_coref_config cfg;
    cfg.vocab = (int)get_u32(b);
    cfg.d_k = (int)get_u32(b);
    cfg.classes = (int)get_u32(b);
    cfg.scaled = (int)get_u32(b);
    cfg.init_std = get_f64(b);
    cfg.seed = get_u64(b);
    uint32_t n = get_u32(b);
    qkv_coref_model *m = NULL;
    if (!b->bad && n == QKV_COREF_PARAMS && cfg.vocab > 0 && cfg.d_k > 0 && cfg.classes > 0 &&
        cfg.vocab <= 1 << 20 && cfg.d_k <= 1 << 16 && cfg.classes <= 1 << 20)
        m = qkv_coref_model_new(&cfg, NULL);
    for (int i = 0; m != NULL && i < QKV_COREF_PARAMS; i++)
        if (!decode_tensor(b, m->params[i])) {
            qkv_coref_model_free(m);
            m = NULL;
        }
    if (m == NULL)
        qkv_error_set(err, QKV_ERR_FORMAT, "%s has inconsistent shapes or values", path);
    return m;
}

qkv_coref_model *qkv_coref_load_abi(unsigned abi, const char *path, uint32_t fingerprint,
                                    qkv_error *err)
{
    if (!qkv_abi_ok(abi, err))
        return NULL;
    buf b = {NULL, 0, 0, 0, 0};
    if ((b.p = read_file(path, &b.len, err)) == NULL)
        return NULL;
    qkv_coref_model *m = decode(&b, path, fingerprint, err);
    free(b.p);
    return m;
}
