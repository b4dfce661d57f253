/*
 * layers.c - linear, embedding, layer norm, multi-head attention, the
 * feed-forward network, the pre-norm Transformer block and the sinusoidal
 * positions: each an init that adds its parameters to a list and a
 * forward that records ops.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "layers/internal.h"
#include "util/util.h"

/* ---- shared by the layer files (internal.h) ---------------------------- */

/* PREFIX.suffix into buf, or suffix alone for an empty prefix (as a lone
 * PyTorch module's state_dict names its "weight"); QKV_ERR_ARG when the
 * prefix is NULL or the name does not fit. */
qkv_status qkv_layer_name(char *buf, size_t len, const char *prefix, const char *suffix,
                          qkv_error *err)
{
    if (prefix == NULL)
        return qkv_error_set(err, QKV_ERR_ARG, "layers: the name prefix is NULL (\"\" for none)");
    if (snprintf(buf, len, "%s%s%s", prefix, prefix[0] != '\0' ? "." : "", suffix) >= (int)len)
        return qkv_error_set(err, QKV_ERR_ARG,
                             "layers: the name prefix of %zu bytes is too long: PREFIX.%s must "
                             "fit in %zu bytes",
                             strlen(prefix), suffix, len - 1);
    return QKV_OK;
}

/* For a layer made of layers: QKV_OK when PREFIX.longest, its longest
 * parameter name, fits. Measured on the caller's prefix, so that a
 * refusal names it, not a prefix derived from it for an inner layer. */
static qkv_status prefix_fits(const char *kind, const char *prefix, const char *longest,
                              qkv_error *err)
{
    if (prefix == NULL)
        return qkv_error_set(err, QKV_ERR_ARG, "layers: the name prefix is NULL (\"\" for none)");
    const size_t n = strlen(prefix);
    if (n + (n > 0) + strlen(longest) > QKV_LAYER_NAME_BYTES - 1)
        return qkv_error_set(err, QKV_ERR_ARG,
                             "%s: the name prefix of %zu bytes is too long: PREFIX.%s must fit in "
                             "%d bytes",
                             kind, n, longest, QKV_LAYER_NAME_BYTES - 1);
    return QKV_OK;
}

/* Adds PREFIX.suffix with this shape and init; QKV_OK or the list's error. */
qkv_status qkv_layer_param(qkv_tensor **out, qkv_params *p, const char *prefix, const char *suffix,
                           int ndim, const int *shape, qkv_init init, qkv_error *err)
{
    char name[128];
    qkv_status s = qkv_layer_name(name, sizeof name, prefix, suffix, err);
    if (s != QKV_OK)
        return s;
    qkv_error local = qkv_error_none();
    *out = qkv_params_add(p, name, ndim, shape, init, &local);
    if (qkv_tensor_is_nil(*out)) {
        if (err != NULL)
            *err = local;
        return local.status;
    }
    return QKV_OK;
}

int qkv_layer_unset(qkv_tape *t, const char *what, const char *kind, int present, int ready)
{
    if (!present)
        qkv_tape_fail(t, QKV_ERR_ARG, "%s: no %s", what, kind);
    else if (!ready)
        qkv_tape_fail(t, QKV_ERR_ARG,
                      "%s: the layer is not initialised (its init failed or was never called)",
                      what);
    return !present || !ready;
}

void qkv_layer_keep_name(char *buf, const char *prefix)
{
    /* a prefix that fits PREFIX.weight fits here, whole: a name is never
     * cut inside a character */
    snprintf(buf, QKV_LAYER_NAME_BYTES, "%s", prefix != NULL ? prefix : "");
}

int qkv_layer_clean(const qkv_tape *t)
{
    return t != NULL && qkv_tape_status(t) == QKV_OK;
}

qkv_tensor *qkv_layer_named(qkv_tape *t, int clean, const char *kind, const char *name,
                            qkv_tensor *y)
{
    if (!clean || qkv_layer_clean(t) || name == NULL || name[0] == '\0')
        return y;
    /* a layer inside this one that named itself keeps its name there */
    const char *m = qkv_tape_error(t);
    char head[QKV_LAYER_NAME_BYTES + 32];
    snprintf(head, sizeof head, "%s '%s': ", kind, name);
    const size_t k = strlen(kind);
    const int own = strncmp(m, kind, k) == 0 && strncmp(m + k, ": ", 2) == 0;
    qkv_tape_reword_failure(t, own ? k + 2 : 0, head);
    return y;
}

/* Whether each layer has what its init adds; a zeroed one has none, and
 * NULL is not ready either. */
static int linear_ready(const qkv_linear *l)
{
    return l != NULL && !qkv_tensor_is_nil(l->weight);
}

static int norm_ready(const qkv_norm *n)
{
    return n != NULL && !qkv_tensor_is_nil(n->gamma) && !qkv_tensor_is_nil(n->beta);
}

static int mha_ready(const qkv_mha *m)
{
    return m != NULL && m->d_model > 0 && m->heads > 0 && linear_ready(&m->qkv) &&
           linear_ready(&m->proj);
}

static int ffn_ready(const qkv_ffn *f)
{
    return f != NULL && linear_ready(&f->up) && linear_ready(&f->down);
}

/* ---- linear ------------------------------------------------------------- */

qkv_status qkv_linear_init(qkv_linear *l, qkv_params *p, const char *prefix, int in, int out,
                           int bias, qkv_error *err)
{
    if (l == NULL)
        return qkv_error_set(err, QKV_ERR_ARG, "linear: no layer to initialise (NULL)");
    memset(l, 0, sizeof *l); /* what a refusal leaves, not the old weights */
    if (in < 1 || out < 1)
        return qkv_error_set(err, QKV_ERR_ARG, "linear: in %d and out %d must be at least 1", in,
                             out);
    l->in = in;
    l->out = out;
    const double bound = 1 / sqrt((double)in);
    const qkv_params_mark m0 = qkv_params_mark_get(p); /* undone on a failure */
    qkv_status s = qkv_layer_param(&l->weight, p, prefix, "weight", 2, (const int[]){in, out},
                                   (qkv_init){QKV_INIT_UNIFORM, -bound, bound}, err);
    if (s == QKV_OK && bias)
        s = qkv_layer_param(&l->bias, p, prefix, "bias", 1, (const int[]){out},
                            (qkv_init){QKV_INIT_ZEROS, 0, 0}, err);
    if (s != QKV_OK) { /* nothing of it stays, nor pointers to what was freed */
        qkv_params_undo(p, &m0);
        memset(l, 0, sizeof *l);
    }
    if (s == QKV_OK)
        qkv_layer_keep_name(l->name, prefix);
    return s;
}

qkv_tensor *qkv_linear_forward(qkv_tape *t, const qkv_linear *l, qkv_tensor *x)
{
    if (qkv_layer_unset(t, "linear", "layer", l != NULL, linear_ready(l)))
        return qkv_nil();
    const int clean = qkv_layer_clean(t);
    return qkv_layer_named(t, clean, "linear", l->name, qkv_affine(t, x, l->weight, l->bias));
}

/* ---- embedding ---------------------------------------------------------- */

qkv_status qkv_embedding_init(qkv_embedding *e, qkv_params *p, const char *prefix, int n, int d,
                              qkv_error *err)
{
    if (e == NULL)
        return qkv_error_set(err, QKV_ERR_ARG, "embedding: no layer to initialise (NULL)");
    memset(e, 0, sizeof *e); /* what a refusal leaves, not the old table */
    if (n < 1 || d < 1)
        return qkv_error_set(err, QKV_ERR_ARG, "embedding: n %d and d %d must be at least 1", n, d);
    qkv_status s = qkv_layer_param(&e->weight, p, prefix, "weight", 2, (const int[]){n, d},
                                   (qkv_init){QKV_INIT_NORMAL, 0, 0.02}, err);
    if (s != QKV_OK)
        e->weight = NULL; /* not the nil tensor: zeroed, as the others */
    else
        qkv_layer_keep_name(e->name, prefix);
    return s;
}

qkv_tensor *qkv_embedding_forward(qkv_tape *t, const qkv_embedding *e, const int *ids, int ndim,
                                  const int *shape)
{
    if (qkv_layer_unset(t, "embedding", "layer", e != NULL,
                        e != NULL && !qkv_tensor_is_nil(e->weight)))
        return qkv_nil();
    const int clean = qkv_layer_clean(t);
    return qkv_layer_named(t, clean, "embedding", e->name,
                           qkv_gather(t, e->weight, ids, ndim, shape));
}

/* ---- layer norm --------------------------------------------------------- */

qkv_status qkv_norm_init(qkv_norm *n, qkv_params *p, const char *prefix, int d, qkv_error *err)
{
    if (n == NULL)
        return qkv_error_set(err, QKV_ERR_ARG, "norm: no layer to initialise (NULL)");
    memset(n, 0, sizeof *n); /* what a refusal leaves, not the old γ and β */
    if (d < 1)
        return qkv_error_set(err, QKV_ERR_ARG, "norm: d %d must be at least 1", d);
    n->eps = 1e-5;
    const qkv_params_mark m0 = qkv_params_mark_get(p); /* undone on a failure */
    qkv_status s = qkv_layer_param(&n->gamma, p, prefix, "weight", 1, (const int[]){d},
                                   (qkv_init){QKV_INIT_ONES, 0, 0}, err);
    if (s == QKV_OK)
        s = qkv_layer_param(&n->beta, p, prefix, "bias", 1, (const int[]){d},
                            (qkv_init){QKV_INIT_ZEROS, 0, 0}, err);
    if (s != QKV_OK) { /* nothing of it stays, nor pointers to what was freed */
        qkv_params_undo(p, &m0);
        memset(n, 0, sizeof *n);
    }
    if (s == QKV_OK)
        qkv_layer_keep_name(n->name, prefix);
    return s;
}

qkv_tensor *qkv_norm_forward(qkv_tape *t, const qkv_norm *n, qkv_tensor *x)
{
    /* a zeroed norm would normalise with γ 1, β 0 and eps 0 (NULL is the
     * op's "none"), a result with no error */
    if (qkv_layer_unset(t, "norm", "layer", n != NULL, norm_ready(n)))
        return qkv_nil();
    const int clean = qkv_layer_clean(t);
    return qkv_layer_named(t, clean, "norm", n->name,
                           qkv_layer_norm(t, x, n->gamma, n->beta, n->eps));
}

/* ---- multi-head attention ----------------------------------------------- */

qkv_status qkv_mha_init(qkv_mha *m, qkv_params *p, const char *prefix, int d_model, int heads,
                        int causal, qkv_error *err)
{
    if (m == NULL)
        return qkv_error_set(err, QKV_ERR_ARG, "mha: no layer to initialise (NULL)");
    memset(m, 0, sizeof *m); /* what a refusal leaves, not the old weights */
    if (d_model < 1 || heads < 1 || d_model % heads != 0)
        return qkv_error_set(err, QKV_ERR_ARG,
                             "mha: d_model %d must be a positive multiple of the heads %d", d_model,
                             heads);
    qkv_status s = prefix_fits("mha", prefix, "proj.weight", err);
    if (s != QKV_OK)
        return s;
    char name[128];
    m->d_model = d_model;
    m->heads = heads;
    m->causal = causal != 0;
    const qkv_params_mark m0 = qkv_params_mark_get(p); /* undone on a failure */
    s = qkv_layer_name(name, sizeof name, prefix, "qkv", err);
    if (s == QKV_OK)
        s = qkv_linear_init(&m->qkv, p, name, d_model, 3 * d_model, 1, err);
    if (s == QKV_OK)
        s = qkv_layer_name(name, sizeof name, prefix, "proj", err);
    if (s == QKV_OK)
        s = qkv_linear_init(&m->proj, p, name, d_model, d_model, 1, err);
    if (s != QKV_OK) { /* nothing of it stays, nor pointers to what was freed */
        qkv_params_undo(p, &m0);
        memset(m, 0, sizeof *m);
    }
    if (s == QKV_OK)
        qkv_layer_keep_name(m->name, prefix);
    return s;
}

/* The additive mask for [B,H,T,T] scores: causal [T,T], padding [B,1,1,T],
 * both [B,1,T,T] (m[b,i,j] = causal[i,j] + pad[b,j]), or NULL for neither;
 * causal is the layer's flag, or 0 when the op drops those keys itself. */
static const qkv_tensor *mask_of(qkv_tape *t, int causal, int B, int T, const qkv_tensor *pad)
{
    if (qkv_tape_is_stale(t, pad)) {
        qkv_tape_fail(t, QKV_ERR_ARG,
                      "mha: the padding mask was made on this tape before its last "
                      "qkv_tape_reset; make it again, or keep it in a heap tensor");
        return qkv_nil();
    }
    if (pad != NULL &&
        (qkv_tensor_is_nil(pad) || pad->ndim != 2 || pad->shape[0] != B || pad->shape[1] != T)) {
        char sp[64];
        qkv_shape_str(pad, sp, sizeof sp);
        qkv_tape_fail(t, QKV_ERR_SHAPE, "mha: the padding mask %s must be [%d,%d]", sp, B, T);
        return qkv_nil();
    }
    /* added to the scores: a 0/1 flag (PyTorch's True for padding) would
     * raise the padded keys' weights, and a NaN spread to every output */
    for (size_t i = 0; pad != NULL && i < pad->numel; i++) {
        const qkv_real v = pad->data[i];
        if (v != 0 && !(isinf(v) && v < 0)) {
            char num[32];
            qkv_tape_fail(t, QKV_ERR_ARG,
                          "mha: the padding mask holds %s at [%zu,%zu]; it takes 0 (a token) and "
                          "-INFINITY (padding) only",
                          qkv_num_str(num, sizeof num, (double)v), i / (size_t)T, i % (size_t)T);
            return qkv_nil();
        }
    }
    if (!causal && pad == NULL)
        return NULL;
    qkv_tensor *mask = !causal       ? qkv_tape_tensor(t, 4, (const int[]){B, 1, 1, T}, 0)
                       : pad == NULL ? qkv_tape_tensor(t, 2, (const int[]){T, T}, 0)
                                     : qkv_tape_tensor(t, 4, (const int[]){B, 1, T, T}, 0);
    if (qkv_tensor_is_nil(mask))
        return mask;
    const int rows = causal ? T : 1, nb = pad != NULL ? B : 1;
    for (int b = 0; b < nb; b++)
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < T; j++) {
                qkv_real v = causal && j > i ? -INFINITY : 0;
                if (pad != NULL)
                    v += pad->data[(size_t)b * T + j];
                mask->data[((size_t)b * rows + i) * T + j] = v;
            }
    return mask;
}

static qkv_tensor *mha_forward(qkv_tape *t, const qkv_mha *m, qkv_tensor *x, const qkv_tensor *pad,
                               qkv_mha_parts *parts)
{
    if (parts != NULL)
        parts->attn = parts->scores = qkv_nil();
    if (qkv_layer_unset(t, "mha", "layer", m != NULL, mha_ready(m)) || qkv_tape_status(t) != QKV_OK)
        return qkv_nil();
    if (qkv_tensor_is_nil(x) || x->ndim != 3 || x->shape[2] != m->d_model) {
        char sx[64];
        qkv_shape_str(x, sx, sizeof sx);
        qkv_tape_fail(t, QKV_ERR_SHAPE, "mha: x %s must be [B,T,%d]", sx, m->d_model);
        return qkv_nil();
    }
    const int B = x->shape[0], T = x->shape[1], D = m->d_model, H = m->heads;
    /* long sequences whose weights nobody reads keep no T×T matrices: the
     * online form, causal by index and no mask but the padding */
    const int online = parts == NULL && T >= QKV_MHA_ONLINE_T;
    const qkv_tensor *mask = mask_of(t, online ? 0 : m->causal, B, T, pad);
    qkv_tensor *qkv = qkv_linear_forward(t, &m->qkv, x); /* [B,T,3D] */
    qkv_attention_parts ap;
    const double scale = 1 / sqrt((double)(D / H));
    /* the heads read from the projection and write the merged [B,T,D] */
    qkv_tensor *merged = online ? qkv_attention_heads_online(t, qkv, H, mask, scale, m->causal)
                                : qkv_attention_heads(t, qkv, H, mask, scale, &ap);
    if (parts != NULL) {
        parts->attn = ap.attn;
        parts->scores = ap.scores;
    }
    return qkv_linear_forward(t, &m->proj, merged);
}

qkv_tensor *qkv_mha_forward(qkv_tape *t, const qkv_mha *m, qkv_tensor *x, const qkv_tensor *pad,
                            qkv_mha_parts *parts)
{
    const int clean = qkv_layer_clean(t);
    qkv_tensor *y = mha_forward(t, m, x, pad, parts);
    return qkv_layer_named(t, clean, "mha", m != NULL ? m->name : NULL, y);
}

qkv_tensor *qkv_padding_mask(qkv_tape *t, int batch, int len, const int *lengths)
{
    if (t == NULL || qkv_tape_status(t) != QKV_OK)
        return qkv_nil();
    if (lengths == NULL) {
        qkv_tape_fail(t, QKV_ERR_ARG, "padding_mask: no lengths (NULL)");
        return qkv_nil();
    }
    if (batch < 1 || len < 1) {
        qkv_tape_fail(t, QKV_ERR_ARG, "padding_mask: batch %d and len %d must be at least 1", batch,
                      len);
        return qkv_nil();
    }
    for (int b = 0; b < batch; b++)
        if (lengths[b] < 0 || lengths[b] > len) {
            qkv_tape_fail(t, QKV_ERR_ARG,
                          "padding_mask: sequence %d has length %d, outside [0, %d]", b, lengths[b],
                          len);
            return qkv_nil();
        }
    qkv_tensor *pad = qkv_tape_tensor(t, 2, (const int[]){batch, len}, 0);
    if (qkv_tensor_is_nil(pad))
        return pad;
    for (int b = 0; b < batch; b++)
        for (int j = 0; j < len; j++)
            pad->data[(size_t)b * (size_t)len + (size_t)j] = j < lengths[b] ? 0 : -INFINITY;
    return pad;
}

/* ---- feed-forward ------------------------------------------------------- */

qkv_status qkv_ffn_init(qkv_ffn *f, qkv_params *p, const char *prefix, int d_model, int hidden,
                        qkv_error *err)
{
    char name[128];
    if (f == NULL)
        return qkv_error_set(err, QKV_ERR_ARG, "ffn: no layer");
    memset(f, 0, sizeof *f);       /* what a refusal leaves, not the old weights */
    if (d_model < 1 || hidden < 1) /* its own sizes, not its linear layers' in and out */
        return qkv_error_set(err, QKV_ERR_ARG, "ffn: d_model %d and hidden %d must be at least 1",
                             d_model, hidden);
    qkv_status s = prefix_fits("ffn", prefix, "down.weight", err);
    if (s != QKV_OK)
        return s;
    const qkv_params_mark m0 = qkv_params_mark_get(p); /* undone on a failure */
    s = qkv_layer_name(name, sizeof name, prefix, "up", err);
    if (s == QKV_OK)
        s = qkv_linear_init(&f->up, p, name, d_model, hidden, 1, err);
    if (s == QKV_OK)
        s = qkv_layer_name(name, sizeof name, prefix, "down", err);
    if (s == QKV_OK)
        s = qkv_linear_init(&f->down, p, name, hidden, d_model, 1, err);
    if (s != QKV_OK) { /* nothing of it stays, nor pointers to what was freed */
        qkv_params_undo(p, &m0);
        memset(f, 0, sizeof *f);
    }
    if (s == QKV_OK)
        qkv_layer_keep_name(f->name, prefix);
    return s;
}

qkv_tensor *qkv_ffn_forward(qkv_tape *t, const qkv_ffn *f, qkv_tensor *x)
{
    if (qkv_layer_unset(t, "ffn", "layer", f != NULL, ffn_ready(f)))
        return qkv_nil();
    const int clean = qkv_layer_clean(t);
    qkv_tensor *y = qkv_linear_forward(t, &f->down, qkv_gelu(t, qkv_linear_forward(t, &f->up, x)));
    return qkv_layer_named(t, clean, "ffn", f->name, y);
}

/* ---- the Transformer block ---------------------------------------------- */

qkv_status qkv_block_init(qkv_block *b, qkv_params *p, const char *prefix, int d_model, int heads,
                          int hidden, int causal, qkv_error *err)
{
    char name[128];
    if (b == NULL)
        return qkv_error_set(err, QKV_ERR_ARG, "block: no layer");
    memset(b, 0, sizeof *b); /* what a refusal leaves, not the old weights */
    /* every size checked before anything is added: a refusal halfway
     * through left ln1 (and more) in the list, and a retry under the same
     * prefix then failed on the name */
    if (d_model < 1 || heads < 1 || d_model % heads != 0 || hidden < 1)
        return qkv_error_set(err, QKV_ERR_ARG,
                             "block: d_model %d must be a positive multiple of the heads %d, "
                             "and hidden %d at least 1",
                             d_model, heads, hidden);
    qkv_status s = prefix_fits("block", prefix, "attn.proj.weight", err);
    if (s != QKV_OK)
        return s;
    const qkv_params_mark m0 = qkv_params_mark_get(p); /* undone on a failure */
    s = qkv_layer_name(name, sizeof name, prefix, "ln1", err);
    if (s == QKV_OK)
        s = qkv_norm_init(&b->ln1, p, name, d_model, err);
    if (s == QKV_OK && (s = qkv_layer_name(name, sizeof name, prefix, "attn", err)) == QKV_OK)
        s = qkv_mha_init(&b->attn, p, name, d_model, heads, causal, err);
    if (s == QKV_OK && (s = qkv_layer_name(name, sizeof name, prefix, "ln2", err)) == QKV_OK)
        s = qkv_norm_init(&b->ln2, p, name, d_model, err);
    if (s == QKV_OK && (s = qkv_layer_name(name, sizeof name, prefix, "ffn", err)) == QKV_OK)
        s = qkv_ffn_init(&b->ffn, p, name, d_model, hidden, err);
    if (s != QKV_OK) { /* nothing of it stays, nor pointers to what was freed */
        qkv_params_undo(p, &m0);
        memset(b, 0, sizeof *b);
    }
    if (s == QKV_OK)
        qkv_layer_keep_name(b->name, prefix);
    return s;
}

qkv_tensor *qkv_block_forward(qkv_tape *t, const qkv_block *b, qkv_tensor *x, const qkv_tensor *pad,
                              qkv_mha_parts *parts)
{
    if (parts != NULL) /* as qkv_mha_forward leaves them on any failure */
        parts->attn = parts->scores = qkv_nil();
    if (qkv_layer_unset(t, "block", "layer", b != NULL,
                        b != NULL && norm_ready(&b->ln1) && mha_ready(&b->attn) &&
                            norm_ready(&b->ln2) && ffn_ready(&b->ffn)))
        return qkv_nil();
    const int clean = qkv_layer_clean(t);
    const int D = b->attn.d_model;
    if (clean && !qkv_tensor_is_nil(x) && (x->ndim != 3 || x->shape[2] != D)) {
        /* x's own shape, before its first layer norm blames its gamma (a
         * nil x is the ops' to name) */
        char sx[64];
        qkv_shape_str(x, sx, sizeof sx);
        qkv_tape_fail(t, QKV_ERR_SHAPE, "block: x %s must be [B,T,%d]", sx, D);
        return qkv_layer_named(t, clean, "block", b->name, qkv_nil());
    }
    qkv_tensor *h =
        qkv_add(t, x, qkv_mha_forward(t, &b->attn, qkv_norm_forward(t, &b->ln1, x), pad, parts));
    h = qkv_add(t, h, qkv_ffn_forward(t, &b->ffn, qkv_norm_forward(t, &b->ln2, h)));
    return qkv_layer_named(t, clean, "block", b->name, h);
}

/* ---- positional encodings ----------------------------------------------- */

qkv_status qkv_sinusoidal_positions(qkv_tensor *pe, qkv_error *err)
{
    if (qkv_tensor_is_nil(pe) || pe->ndim != 2) {
        char sp[64];
        qkv_shape_str(pe, sp, sizeof sp);
        return qkv_error_set(err, QKV_ERR_SHAPE, "positions: the table %s must be [T,D]", sp);
    }
    const int T = pe->shape[0], D = pe->shape[1];
    for (int pos = 0; pos < T; pos++)
        for (int c = 0; c < D; c++) {
            double freq = pow(10000.0, -(double)(c - c % 2) / D); /* 1/10000^(2i/D) */
            double a = pos * freq;
            pe->data[(size_t)pos * D + c] = (qkv_real)(c % 2 == 0 ? sin(a) : cos(a));
        }
    return QKV_OK;
}

qkv_status qkv_positions_init(qkv_embedding *e, qkv_params *p, const char *prefix, int max_len,
                              int d, qkv_error *err)
{
    if (max_len < 1 || d < 1) { /* its own sizes, not the embedding's n and d */
        if (e != NULL)
            memset(e, 0, sizeof *e); /* as a refused qkv_embedding_init leaves it */
        return qkv_error_set(err, QKV_ERR_ARG, "positions: max_len %d and d %d must be at least 1",
                             max_len, d);
    }
    return qkv_embedding_init(e, p, prefix, max_len, d, err);
}

qkv_tensor *qkv_add_positions(qkv_tape *t, qkv_tensor *x, qkv_tensor *table)
{
    if (qkv_tape_status(t) != QKV_OK)
        return qkv_nil();
    if (qkv_tensor_is_nil(x) || qkv_tensor_is_nil(table) || x->ndim < 2 || table->ndim != 2 ||
        x->shape[x->ndim - 1] != table->shape[1] || x->shape[x->ndim - 2] > table->shape[0]) {
        char sx[64], st[64];
        qkv_shape_str(x, sx, sizeof sx);
        qkv_shape_str(table, st, sizeof st);
        qkv_tape_fail(t, QKV_ERR_SHAPE, "positions: x %s needs a table [max_len >= T, D], not %s",
                      sx, st);
        return qkv_nil();
    }
    return qkv_add(t, x, qkv_slice(t, table, 0, 0, x->shape[x->ndim - 2]));
}
