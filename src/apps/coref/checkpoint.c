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
#define MAX_FILE (256u << 20) /* the largest checkpoint read */

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

/* Bytes of one saved tensor of shape (rows, cols): ndim, dims, data. */
static int tensor_bytes(uint64_t rows, uint64_t cols, uint64_t *n)
{
    if (rows > UINT32_MAX || cols > UINT32_MAX || rows * cols > (UINT64_MAX - 12) / 4)
        return 0;
    *n = 4 + 4 * 2 + 4 * rows * cols;
    return 1;
}

/* Bytes of the four tensors of a model of this config, or 0 when the
 * sizes overflow. */
static uint64_t tensors_bytes(uint64_t vocab, uint64_t d_k, uint64_t classes)
{
    uint64_t qkv, o;
    if (!tensor_bytes(vocab, d_k, &qkv) || !tensor_bytes(d_k, classes, &o) ||
        qkv > (UINT64_MAX - o) / 3)
        return 0;
    return 3 * qkv + o;
}

/* The first weight that is not finite, as "wq[17] = nan", or NULL. */
static const char *non_finite(const qkv_coref_model *m, char *buf, size_t len)
{
    static const char *names[QKV_COREF_PARAMS] = {"wq", "wk", "wv", "wo"};
    for (int i = 0; i < QKV_COREF_PARAMS; i++)
        for (size_t j = 0; j < m->params[i]->numel; j++)
            if (!isfinite((float)m->params[i]->data[j])) {
                snprintf(buf, len, "%s[%zu] = %g", names[i], j, (double)m->params[i]->data[j]);
                return buf;
            }
    return NULL;
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

static qkv_status write_buf(void *ctx, FILE *f, qkv_error *err)
{
    const buf *b = ctx;
    (void)err; /* a short write shows in ferror, which the caller checks */
    fwrite(b->p, 1, b->len, f);
    return QKV_OK;
}

qkv_status qkv_coref_save(const qkv_coref_model *m, uint32_t fingerprint, const char *path,
                          qkv_error *err)
{
    char bad[64];
    if (m == NULL || path == NULL)
        return qkv_error_set(err, QKV_ERR_ARG, "save: no model or no path");
    if (non_finite(m, bad, sizeof bad) != NULL)
        return qkv_error_set(err, QKV_ERR_NUMERIC,
                             "refusing to save %s: a weight is not finite (%s); %s was left "
                             "untouched",
                             path, bad, path);
    uint64_t body =
        tensors_bytes((uint64_t)m->cfg.vocab, (uint64_t)m->cfg.d_k, (uint64_t)m->cfg.classes);
    buf b = {NULL, 0, (size_t)(HEADER_BYTES + body + 4), 0, 0};
    if ((b.p = qkv_malloc(b.cap)) == NULL)
        return qkv_error_set(err, QKV_ERR_NOMEM, "%s: out of memory", path);
    encode(m, fingerprint, &b);
    qkv_status s = b.bad ? qkv_error_set(err, QKV_ERR_ARG,
                                         "save: the model's shapes do not "
                                         "match its config")
                         : qkv_save_atomic(path, write_buf, &b, err);
    free(b.p);
    return s;
}

/* ------------------------------------------------------------------------ */
/* load                                                                     */

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

/* Checks everything the header declares against the bytes present, before
 * anything is allocated: the magic, the version, the declared file size,
 * the CRC, the vocabulary, and that the tensors the config implies fill
 * exactly the bytes between the header and the CRC. */
static int check_header(buf *b, const char *path, uint32_t fingerprint, qkv_coref_config *cfg,
                        qkv_error *err)
{
    if (b->len < HEADER_BYTES + 4 || memcmp(b->p, MAGIC, 8) != 0) {
        qkv_error_set(err, QKV_ERR_FORMAT, "%s is not a qkv checkpoint (%s)", path,
                      memcmp(b->p, MAGIC, b->len < 8 ? b->len : 8) ? "wrong magic bytes"
                                                                   : "too short");
        return 0;
    }
    b->pos = 8;
    uint32_t version = get_u32(b);
    uint64_t size = get_u64(b);
    if (version == 0 || version > QKV_COREF_CHECKPOINT_VERSION) {
        qkv_error_set(err, QKV_ERR_FORMAT,
                      version ? "%s has format version %u; this qkv reads version %u (upgrade qkv)"
                              : "%s is damaged: format version %u (this qkv reads version %u)",
                      path, version, QKV_COREF_CHECKPOINT_VERSION);
        return 0;
    }
    if (size != b->len) {
        qkv_error_set(err, QKV_ERR_FORMAT, "%s is %s: %zu bytes, the header says %llu", path,
                      b->len < size ? "truncated" : "damaged", b->len, (unsigned long long)size);
        return 0;
    }
    b->pos = b->len - 4;
    if (get_u32(b) != qkv_crc32(0, b->p, b->len - 4)) {
        qkv_error_set(err, QKV_ERR_FORMAT, "%s is corrupted: checksum mismatch", path);
        return 0;
    }
    b->pos = 8 + 4 + 8;
    uint32_t fp = get_u32(b);
    if (fp != fingerprint) {
        qkv_error_set(err, QKV_ERR_FORMAT,
                      "%s was trained on another vocabulary (fingerprint %08x, this build %08x)",
                      path, fp, fingerprint);
        return 0;
    }
    uint32_t vocab = get_u32(b), d_k = get_u32(b), classes = get_u32(b), scaled = get_u32(b);
    cfg->init_std = get_f64(b);
    cfg->seed = get_u64(b);
    uint32_t n = get_u32(b);
    uint64_t want = tensors_bytes(vocab, d_k, classes);
    if (b->bad || n != QKV_COREF_PARAMS || vocab < 1 || d_k < 1 || classes < 1 ||
        vocab > INT32_MAX || d_k > QKV_COREF_MAX_DK || classes > INT32_MAX || scaled > 1 ||
        !isfinite(cfg->init_std) || cfg->init_std < 0) {
        qkv_error_set(err, QKV_ERR_FORMAT,
                      "%s has an impossible header (%u tensors, vocab %u, "
                      "d_k %u, classes %u)",
                      path, n, vocab, d_k, classes);
        return 0;
    }
    if (want != b->len - HEADER_BYTES - 4) {
        qkv_error_set(err, QKV_ERR_FORMAT,
                      "%s has inconsistent sizes: its header declares %llu bytes of weights, "
                      "the file holds %zu",
                      path, (unsigned long long)want, b->len - HEADER_BYTES - 4);
        return 0;
    }
    cfg->vocab = (int)vocab;
    cfg->d_k = (int)d_k;
    cfg->classes = (int)classes;
    cfg->scaled = (int)scaled;
    return 1;
}

qkv_coref_model *qkv_coref_load_buffer(const void *data, size_t len, const char *name,
                                       uint32_t fingerprint, qkv_error *err)
{
    buf b = {(unsigned char *)(uintptr_t)data, len, len, 0, 0};
    qkv_coref_config cfg;
    if (data == NULL || !check_header(&b, name, fingerprint, &cfg, err))
        return NULL;
    qkv_coref_model *m = qkv_coref_model_alloc(&cfg, err);
    for (int i = 0; m != NULL && i < QKV_COREF_PARAMS; i++)
        if (!decode_tensor(&b, m->params[i])) {
            qkv_coref_model_free(m);
            m = NULL;
            qkv_error_set(err, QKV_ERR_FORMAT, "%s has inconsistent shapes or values", name);
        }
    return m;
}

qkv_coref_model *qkv_coref_load_abi(unsigned abi, const char *path, uint32_t fingerprint,
                                    qkv_error *err)
{
    size_t len;
    if (!qkv_abi_ok(abi, err))
        return NULL;
    if (path == NULL) {
        qkv_error_set(err, QKV_ERR_ARG, "load: no path");
        return NULL;
    }
    unsigned char *p = qkv_read_file(path, MAX_FILE, &len, err);
    if (p == NULL)
        return NULL;
    qkv_coref_model *m = qkv_coref_load_buffer(p, len, path, fingerprint, err);
    free(p);
    return m;
}
