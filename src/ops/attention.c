/*
 * attention.c - the fused attention ops, forward and backward: qkv_attention
 * on Q, K and V, and qkv_embed_attention, which looks Q, K and V up from
 * weight tables itself.
 *
 * Both record one node and run the kernels of kernels/attention.c one batch
 * item at a time (qkv_attention_forward and qkv_attention_backward), so an item's
 * scores and weights stay in cache between the steps; the items may run on
 * several threads (util/threads.c). The embedded form gathers each item's Q, K
 * and V rows into a small buffer, kept for backward while they are small,
 * and its backward adds the rows' gradients straight into the tables'
 * gradients, so no [B,T,d] tensor is made: those are most of a small
 * model's memory traffic. The heads form (qkv_attention_heads) likewise
 * copies each item's rows out of the fused projection into a small buffer
 * and writes its output rows straight into the merged heads, so that no
 * [B,H,T,d_h] tensor is made. Every result and gradient is bit for bit
 * what the unfused ops give (see qkv_attention in ops.h).
 */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "ops/op.h"
#include "qkv/runtime.h"

/* The most bytes of looked-up rows the embedded form keeps for backward. */
#define KEEP_ROWS_MAX (512u << 10)

/* The node's own record (node->state). */
typedef struct attn_rec {
    int n0, n1; /* the leading (batch) dimensions, padded to two */
    int tq, tk, dk, dv;
    qkv_tensor *v; /* V, or the table Wv in the embedded form */
    qkv_tensor *scores, *attn;
    const qkv_tensor *mask;
    qkv_bcast mp; /* the mask's strides against the scores */
    double scale;
    qkv_real *scratch; /* the kernels' scratch (see kernels.h) */
    const int *ids;    /* embedded form: [B,T] token ids; NULL otherwise */
    qkv_real *rows;    /* embedded form: Q, K, V rows of every item when
                           * kept for backward (keep_rows), else one item's
                           * per part */
    int keep_rows;
    int width;        /* heads form: the model width D of x [B,T,3D]; else 0 */
    int parts;        /* threads the item loops may use (threads.c) */
    size_t nscratch;  /* reals of scratch per part */
    int online;       /* online form: no S or A (attention_online.c) */
    int causal;       /* online form: keys j > i dropped by index */
    int bq, bk;       /* online form: its blocks */
    qkv_real *ml;     /* online form: each row's m, then 1/l, for backward */
    const int *query; /* rows form: the one output row of each item */
    qkv_real *obuf;   /* rows form: one item's O per part (kernels.h); row
                       * only: one item's row of S */
    int row_only;     /* rows form without parts: S and A of the query rows
                       * alone (kernels.h); no scores or attn tensors */
    qkv_real *arow;   /* row only: each item's row of A, for backward */
} attn_rec;

/* Reals of one item's Q, K and V rows (and of their gradients). */
static size_t item_rows(const attn_rec *r)
{
    return (size_t)r->tq * r->dk + (size_t)r->tk * (r->dk + r->dv);
}

/* Multiply-adds of one item, forward or backward, roughly. */
static size_t item_work(const attn_rec *r)
{
    return (size_t)r->tq * r->tk * (size_t)(r->dk + r->dv) + 1;
}

/* One item's inputs and the gradients to accumulate into. */
typedef struct attn_io {
    const qkv_real *q, *k, *v;
    qkv_real *dq, *dk, *dv;
} attn_io;

/* The kernels' view of item b. */
static qkv_attn_shape item_shape(const attn_rec *r, size_t b)
{
    qkv_attn_shape sh = {r->tq, r->tk, r->dk, r->dv, NULL,      0, 0, r->scale,
                         NULL,  0,     r->bq, r->bk, r->causal, 0, 0};
    if (r->query != NULL) {
        sh.row_out = 1;
        sh.row = r->query[b];
    }
    if (r->ids != NULL) /* backward adds the rows' gradients into the tables */
        sh.row_index = r->ids + b * (size_t)r->tq;
    if (r->mask != NULL) {
        size_t i0 = b / (size_t)r->n1, i1 = b % (size_t)r->n1;
        sh.mask = r->mask->data + i0 * r->mp.bstride[0] + i1 * r->mp.bstride[1];
        sh.mask_rs = r->mp.bstride[2];
        sh.mask_cs = r->mp.bstride[3];
    }
    return sh;
}

/* Item b's Q, K and V (rows kept in r->rows in the embedded form) and,
 * when grads is set, where their gradients go (NULL for an input without a
 * gradient; the tables' gradients themselves in the embedded form). */
static attn_io item_io(const attn_rec *r, const qkv_tensor *q, const qkv_tensor *k, size_t b,
                       int grads, int part)
{
    const size_t nq = (size_t)r->tq * r->dk, nk = (size_t)r->tk * r->dk, nv = (size_t)r->tk * r->dv;
    const qkv_tensor *v = r->v;
    attn_io io = {NULL, NULL, NULL, NULL, NULL, NULL};
    if (r->ids == NULL) {
        io.q = q->data + b * nq;
        io.k = k->data + b * nk;
        io.v = v->data + b * nv;
        if (grads) {
            io.dq = q->grad ? q->grad + b * nq : NULL;
            io.dk = k->grad ? k->grad + b * nk : NULL;
            io.dv = v->grad ? v->grad + b * nv : NULL;
        }
        return io;
    }
    /* the forward pass gathers; backward finds the rows where it left them,
     * or gathers them again when they were not kept */
    qkv_real *rows = r->rows + (r->keep_rows ? b : (size_t)part) * (nq + nk + nv);
    if (!grads || !r->keep_rows) {
        const int *ids = r->ids + b * (size_t)r->tq;
        qkv_gather_rows(rows, q->data, ids, (size_t)r->tq, (size_t)r->dk);
        qkv_gather_rows(rows + nq, k->data, ids, (size_t)r->tk, (size_t)r->dk);
        qkv_gather_rows(rows + nq + nk, v->data, ids, (size_t)r->tk, (size_t)r->dv);
    }
    io = (attn_io){rows, rows + nq, rows + nq + nk, q->grad, k->grad, v->grad};
    return io;
}

/* Heads form: reals of one part's buffer: an item's Q, K and V rows, its
 * output rows (or their gradient), the gradients of Q, K and V, and in
 * the online form the output rows again for backward. */
static size_t heads_buffer(const attn_rec *r)
{
    return 2 * item_rows(r) + (size_t)(r->online ? 2 : 1) * r->tq * r->dv;
}

/* Heads form: item b is head b % H of batch row b / H. Its part of x
 * [B,T,3D] (Q; K and V follow, D and 2D columns on) and of the merged
 * output [B,T,D], each a block of d_h columns. */
static size_t heads_offset(const attn_rec *r, size_t b, int width)
{
    return (b / (size_t)r->n1) * (size_t)r->tq * (size_t)width +
           (b % (size_t)r->n1) * (size_t)r->dk;
}

/* rows rows of d reals, each from every ld reals of src, into dst (or, with
 * back set, from dst into src: stored, or added when add is set). */
static void copy_rows(qkv_real *dst, qkv_real *src, size_t rows, size_t d, size_t ld, int back,
                      int add)
{
    for (size_t i = 0; i < rows; i++, dst += d, src += ld)
        if (!back)
            memcpy(dst, src, sizeof *dst * d);
        else if (!add)
            memcpy(src, dst, sizeof *dst * d);
        else
            for (size_t c = 0; c < d; c++)
                src[c] += dst[c];
}

/* Heads form: Q, K and V of item b from x into rows, each tq·d_h reals
 * (or, with back set, their gradients from rows into x's gradient, added
 * unless store). */
static void heads_qkv(const attn_rec *r, const qkv_tensor *x, size_t b, qkv_real *rows, int back,
                      int store)
{
    const size_t w = (size_t)r->width, ld = 3 * w, n = (size_t)r->tq * r->dk;
    qkv_real *base = (back ? x->grad : x->data) + heads_offset(r, b, (int)ld);
    for (int part = 0; part < 3; part++)
        copy_rows(rows + (size_t)part * n, base + (size_t)part * w, (size_t)r->tq, (size_t)r->dk,
                  ld, back, !store);
}

/* The item loops, as jobs for qkv_parallel_for. */
typedef struct attn_job {
    const attn_rec *r;
    const qkv_tensor *q, *k, *out;
    int zero[5]; /* backward: clear each item's slice of dQ, dK, dV (plain form), dS, dA first */
} attn_job;

/* The row-only form's forward over items b0..b1 (kernels.h): each item's
 * query row of S + M, then the softmax of all those rows in one call,
 * then each output row. Of Q only the query row is looked up; the rows
 * are kept for backward as item_io keeps them (r->keep_rows), or V's
 * looked up again. */
static void forward_rows_only(const attn_job *j, int part, size_t b0, size_t b1)
{
    const attn_rec *r = j->r;
    const size_t tk = (size_t)r->tk, dk = (size_t)r->dk, dv = (size_t)r->dv;
    const size_t nq = (size_t)r->tq * dk, nk = tk * dk, per = nq + nk + tk * dv;
    for (size_t b = b0; b < b1; b++) {
        const qkv_attn_shape sh = item_shape(r, b);
        const int *ids = r->ids + b * (size_t)r->tq;
        qkv_real *rows = r->rows + (r->keep_rows ? b : (size_t)part) * per;
        qkv_gather_rows(rows + (size_t)sh.row * dk, j->q->data, ids + sh.row, 1, dk);
        qkv_gather_rows(rows + nq, j->k->data, ids, tk, dk);
        if (r->keep_rows)
            qkv_gather_rows(rows + nq + nk, r->v->data, ids, tk, dv);
        qkv_attention_row_scores(&sh, rows, rows + nq, r->obuf + (size_t)part * tk,
                                 r->arow + b * tk);
    }
    qkv_softmax_rows(r->arow + b0 * tk, r->arow + b0 * tk, b1 - b0, tk);
    for (size_t b = b0; b < b1; b++) {
        const qkv_attn_shape sh = item_shape(r, b);
        qkv_real *rows = r->rows + (r->keep_rows ? b : (size_t)part) * per;
        if (!r->keep_rows)
            qkv_gather_rows(rows + nq + nk, r->v->data, r->ids + b * (size_t)r->tq, tk, dv);
        qkv_attention_row_output(&sh, r->arow + b * tk, rows + nq + nk, j->out->data + b * dv);
    }
}

static void forward_items(void *ctx, int part, size_t b0, size_t b1)
{
    const attn_job *j = ctx;
    const attn_rec *r = j->r;
    const size_t ns = (size_t)r->tq * r->tk, no = (size_t)r->tq * r->dv;
    if (r->row_only) {
        forward_rows_only(j, part, b0, b1);
        return;
    }
    for (size_t b = b0; b < b1; b++) {
        qkv_attn_shape sh = item_shape(r, b);
        if (r->width != 0) { /* heads form: rows in, output rows out */
            /* Q, K and V rows, each tq·d_h = no reals, then O's */
            qkv_real *rows = r->rows + (size_t)part * heads_buffer(r), *o = rows + item_rows(r);
            heads_qkv(r, j->q, b, rows, 0, 0);
            if (r->online)
                qkv_attention_online_forward(&sh, rows, rows + no, rows + 2 * no, o,
                                             r->ml != NULL ? r->ml + b * 2 * (size_t)r->tq : NULL,
                                             r->scratch + (size_t)part * r->nscratch);
            else
                qkv_attention_forward(&sh, rows, rows + no, rows + 2 * no, r->scores->data + b * ns,
                                      r->attn->data + b * ns, o);
            copy_rows(o, j->out->data + heads_offset(r, b, r->width), (size_t)r->tq, (size_t)r->dv,
                      (size_t)r->width, 1, 0);
            continue;
        }
        attn_io io = item_io(r, j->q, j->k, b, 0, part);
        if (r->query != NULL) { /* O's row into the output */
            qkv_real *o = r->obuf + (size_t)part * no;
            qkv_attention_forward(&sh, io.q, io.k, io.v, r->scores->data + b * ns,
                                  r->attn->data + b * ns, o);
            memcpy(j->out->data + b * (size_t)r->dv, o + (size_t)sh.row * r->dv,
                   sizeof *o * (size_t)r->dv);
            continue;
        }
        if (r->online) {
            qkv_attention_online_forward(&sh, io.q, io.k, io.v, j->out->data + b * no,
                                         r->ml != NULL ? r->ml + b * 2 * (size_t)r->tq : NULL,
                                         r->scratch + (size_t)part * r->nscratch);
            continue;
        }
        qkv_attention_forward(&sh, io.q, io.k, io.v, r->scores->data + b * ns,
                              r->attn->data + b * ns, j->out->data + b * no);
    }
}

/* Item b's backward, given its inputs, dO and where its gradients go:
 * the S and A slices claimed unfilled are cleared first, while in cache,
 * and a claimed pair tells the kernels nothing else flows into them. */
static void item_backward(const attn_job *j, size_t b, int part, const qkv_real *q,
                          const qkv_real *k, const qkv_real *v, const qkv_real *o,
                          const qkv_real *dout, qkv_real *dq, qkv_real *dk, qkv_real *dv)
{
    const attn_rec *r = j->r;
    const size_t ns = (size_t)r->tq * r->tk;
    qkv_attn_shape sh = item_shape(r, b);
    if (r->row_only) { /* dout: the item's one row */
        qkv_attention_row_backward(&sh, q, k, v, r->arow + b * (size_t)r->tk, dout, dq, dk, dv,
                                   r->scratch + (size_t)part * r->nscratch);
        return;
    }
    if (r->online) { /* o: the item's output rows */
        qkv_attention_online_backward(&sh, q, k, v, o, r->ml + b * 2 * (size_t)r->tq, dout, dq, dk,
                                      dv, r->scratch + (size_t)part * r->nscratch);
        return;
    }
    qkv_real *ds = r->scores->grad, *da = r->attn->grad;
    sh.sa_zero = j->zero[3] && j->zero[4]; /* no other node reads the scores or weights */
    if (j->zero[3] && ds != NULL)
        qkv_zero(ds + b * ns, ns);
    if (j->zero[4] && da != NULL)
        qkv_zero(da + b * ns, ns);
    qkv_attention_backward(&sh, q, k, v, r->attn->data + b * ns, dout, ds ? ds + b * ns : NULL,
                           da ? da + b * ns : NULL, dq, dk, dv,
                           r->scratch + (size_t)part * r->nscratch);
}

/* Backward of the heads form's items: each item's rows and output
 * gradient copied in, its gradients from zero, then stored (x's gradient
 * claimed unfilled) or added into x's gradient, whose blocks of columns
 * are the item's alone. */
static void backward_heads_items(void *ctx, int part, size_t b0, size_t b1)
{
    const attn_job *j = ctx;
    const attn_rec *r = j->r;
    const size_t no = (size_t)r->tq * r->dv, per = item_rows(r);
    qkv_real *rows = r->rows + (size_t)part * heads_buffer(r), *dout = rows + per, *g = dout + no;
    for (size_t b = b0; b < b1; b++) {
        heads_qkv(r, j->q, b, rows, 0, 0);
        copy_rows(dout, j->out->grad + heads_offset(r, b, r->width), (size_t)r->tq, (size_t)r->dv,
                  (size_t)r->width, 0, 0);
        qkv_zero(g, per);
        qkv_real *o = NULL;
        if (r->online) { /* its output rows too, after the gradients */
            o = g + per;
            copy_rows(o, j->out->data + heads_offset(r, b, r->width), (size_t)r->tq, (size_t)r->dv,
                      (size_t)r->width, 0, 0);
        }
        item_backward(j, b, part, rows, rows + no, rows + 2 * no, o, dout, g, g + no, g + 2 * no);
        heads_qkv(r, j->q, b, g, 1, j->zero[0]);
    }
}

static void backward_items(void *ctx, int part, size_t b0, size_t b1)
{
    const attn_job *j = ctx;
    const attn_rec *r = j->r;
    /* an item's output: its rows, or the one row of the rows form */
    const size_t no = (size_t)(r->query != NULL ? 1 : r->tq) * r->dv;
    const size_t nq = (size_t)r->tq * r->dk, nk = (size_t)r->tk * r->dk, nv = (size_t)r->tk * r->dv;
    for (size_t b = b0; b < b1; b++) {
        attn_io io = item_io(r, j->q, j->k, b, 1, part);
        /* gradients claimed unfilled: each item clears its own slices just
         * before it adds into them, while they are in cache */
        if (j->zero[0] && io.dq != NULL)
            qkv_zero(io.dq, nq);
        if (j->zero[1] && io.dk != NULL)
            qkv_zero(io.dk, nk);
        if (j->zero[2] && io.dv != NULL)
            qkv_zero(io.dv, nv);
        item_backward(j, b, part, io.q, io.k, io.v, j->out->data + b * no, j->out->grad + b * no,
                      io.dq, io.dk, io.dv);
    }
}

static void attention_backward(const qkv_node *nd);
/* One definition per form, all with the same backward, so that an error
 * recording the node (an input from another tape, no memory) names the
 * form that was called. */
enum { ATTN_PLAIN, ATTN_ONLINE, ATTN_HEADS, ATTN_HEADS_ONLINE, ATTN_EMBED, ATTN_EMBED_ROWS };
static const qkv_op_def op_attention[] = {
    [ATTN_PLAIN] = {"attention", attention_backward, QKV_OP_CLAIMS_GRADS},
    [ATTN_ONLINE] = {"attention_online", attention_backward, QKV_OP_CLAIMS_GRADS},
    [ATTN_HEADS] = {"attention_heads", attention_backward, QKV_OP_CLAIMS_GRADS},
    [ATTN_HEADS_ONLINE] = {"attention_heads_online", attention_backward, QKV_OP_CLAIMS_GRADS},
    [ATTN_EMBED] = {"embed_attention", attention_backward, QKV_OP_CLAIMS_GRADS},
    [ATTN_EMBED_ROWS] = {"embed_attention_rows", attention_backward, QKV_OP_CLAIMS_GRADS},
};

/* Makes the outputs, runs the forward pass item by item and records the
 * node. q and k are the inputs (or tables) the node keeps. */
static qkv_tensor *attn_run(qkv_tape *t, const qkv_op_def *def, attn_rec *r, qkv_tensor *q,
                            qkv_tensor *k, int nd, const int *lead, qkv_attention_parts *parts)
{
    const char *name = def->name;
    int sshape[QKV_MAX_DIMS], oshape[QKV_MAX_DIMS];
    memcpy(sshape, lead, sizeof(int) * (size_t)(nd - 2));
    memcpy(oshape, lead, sizeof(int) * (size_t)(nd - 2));
    sshape[nd - 2] = oshape[nd - 2] = r->tq;
    sshape[nd - 1] = r->tk;
    oshape[nd - 1] = r->dv;
    if (r->width != 0) { /* heads form: the heads merged, [B,T,D] */
        oshape[1] = r->tq;
        oshape[2] = r->width;
    }
    const int qk_grad = qkv_wants_grad(q, k);
    /* the scores' shape, for the plans; the online form makes no S or A */
    qkv_tensor sview = {.ndim = nd};
    memcpy(sview.shape, sshape, sizeof(int) * (size_t)nd);
    /* the rows form with no parts wanted: nothing reads the other rows of
     * S and A, so they are not made, when that row's chains are the full
     * products' (kernels.h) */
    r->row_only = r->query != NULL && parts == NULL &&
                  qkv_attention_row_only_exact(r->tq, r->tk, r->dk, r->dv);
    if (!r->online && !r->row_only) {
        r->scores = qkv_tape_tensor(t, nd, sshape, qk_grad);
        r->attn = qkv_tape_tensor(t, nd, sshape, qk_grad);
    }
    int ond = r->width != 0 ? 3 : nd;
    if (r->query != NULL) { /* [B,dv] */
        ond = 2;
        oshape[1] = r->dv;
    }
    qkv_tensor *out = qkv_op_tensor(t, name, ond, oshape, qk_grad || r->v->grad != NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    if (r->mask != NULL &&
        (qkv_tensor_is_nil(r->mask) || !qkv_bcast_plan(&sview, r->mask, &r->mp))) {
        char sm[64], ss[64];
        qkv_shape_str(r->mask, sm, sizeof sm);
        qkv_shape_str(&sview, ss, sizeof ss);
        qkv_tape_fail(t, QKV_ERR_SHAPE, "%s: mask %s does not broadcast to the scores %s", name, sm,
                      ss);
        return qkv_nil();
    }
    qkv_bcast lead_dims; /* the leading dimensions, padded to two */
    qkv_bcast_plan(&sview, &sview, &lead_dims);
    r->n0 = lead_dims.dim[0];
    r->n1 = lead_dims.dim[1];
    const size_t ns = (size_t)r->tq * r->tk, per = item_rows(r);
    const size_t items = (size_t)r->n0 * r->n1;
    r->parts = qkv_parallel_parts(items, items * item_work(r), qkv_threads());
    if (r->ids != NULL) { /* Q, K, V rows: all kept, or one item's per part */
        size_t n;
        /* keep every item's rows for backward when they fit in cache
         * beside everything else; larger ones are cheaper to gather again
         * from the tables than to bring back from memory */
        r->keep_rows = out->grad != NULL && per * items * sizeof(qkv_real) <= KEEP_ROWS_MAX;
        if (!qkv_mul_size(per * sizeof(qkv_real), r->keep_rows ? items : (size_t)r->parts, &n)) {
            qkv_tape_fail(t, QKV_ERR_NOMEM, "%s: %zu items of %zu reals are too many", name, items,
                          per);
            return qkv_nil();
        }
        if ((r->rows = qkv_op_alloc(t, name, n)) == NULL)
            return qkv_nil();
        const size_t nobuf = r->row_only ? (size_t)r->tk : (size_t)r->tq * (size_t)r->dv;
        if (r->query != NULL && (!qkv_mul_size(sizeof(qkv_real) * nobuf, (size_t)r->parts, &n) ||
                                 (r->obuf = qkv_op_alloc(t, name, n)) == NULL))
            return qkv_nil();
        if (r->row_only && (!qkv_mul_size(sizeof(qkv_real) * (size_t)r->tk, items, &n) ||
                            (r->arow = qkv_op_alloc(t, name, n)) == NULL))
            return qkv_nil();
    } else if (r->width != 0) { /* heads form: one buffer per part */
        size_t n;
        if (!qkv_mul_size(heads_buffer(r) * sizeof(qkv_real), (size_t)r->parts, &n) ||
            (r->rows = qkv_op_alloc(t, name, n)) == NULL)
            return qkv_nil();
    }
    if (r->online) { /* blocks of scores and, for backward, of dP and a block
                      * of dO's rows; each row's m and 1/l */
        qkv_attention_online_block_sizes(r->tq, r->tk, &r->bq, &r->bk);
        r->nscratch = (size_t)(out->grad != NULL ? 2 : 1) * (size_t)r->bq * (size_t)r->bk +
                      (out->grad != NULL ? (size_t)r->bq * (size_t)r->dv : 0);
        size_t n, nl;
        if (!qkv_mul_size(sizeof(qkv_real) * r->nscratch, (size_t)r->parts, &n) ||
            !qkv_mul_size(sizeof(qkv_real) * 2 * (size_t)r->tq, items, &nl) ||
            (r->scratch = qkv_op_alloc(t, name, n)) == NULL ||
            (out->grad != NULL && (r->ml = qkv_op_alloc(t, name, nl)) == NULL))
            return qkv_nil();
    }
    attn_job job = {r, q, k, out, {0, 0, 0, 0, 0}};
    qkv_parallel_for(items, items * item_work(r), r->parts, forward_items, &job);
    if (parts != NULL) {
        parts->scores = r->scores;
        parts->attn = r->attn;
    }
    if (out->grad == NULL)
        return out;
    /* the kernels' scratch (kernels.h) for each part: dS, and in the
     * embedded form one item's gradients (the rows form: its own) */
    if (!r->online) {
        r->nscratch = r->row_only        ? qkv_attention_row_only_scratch(r->tk, r->dk)
                      : r->query != NULL ? qkv_attention_row_scratch(r->tq, r->tk, r->dk, r->dv)
                                         : ns + (r->ids != NULL ? per : 0);
        size_t n;
        if (!qkv_mul_size(sizeof(qkv_real) * r->nscratch, (size_t)r->parts, &n) ||
            (r->scratch = qkv_op_alloc(t, name, n)) == NULL)
            return qkv_nil();
    }
    qkv_tensor *in[3] = {q, k, r->v};
    qkv_node *node = qkv_tape_record(t, def, out, r->width != 0 ? 1 : 3, in);
    if (node == NULL)
        return qkv_nil();
    node->constant = r->mask;
    node->state = r;
    /* a gradient that reaches only the scores or the weights reaches the
     * node too (a link that cannot be recorded names this op, not "output") */
    if (r->scores != NULL && r->scores->grad != NULL &&
        (qkv_tape_record_output(t, r->scores, out) == NULL ||
         qkv_tape_record_output(t, r->attn, out) == NULL)) {
        qkv_tape_name_failure(t, name);
        return qkv_nil();
    }
    return out;
}

static void attention_backward(const qkv_node *nd)
{
    const attn_rec *r = nd->state;
    const size_t items = (size_t)r->n0 * r->n1;
    attn_job job = {r, nd->in[0], r->width == 0 ? nd->in[1] : NULL, nd->out, {0, 0, 0, 0, 0}};
    /* the weights and scores are outputs too (qkv_attention_parts). Each
     * item owns a slice of their gradients and, in the plain form, of
     * every other one, so one that no node has filled is cleared item by
     * item; the embedded form adds into shared tables, cleared whole first */
    qkv_tensor *g[5] = {nd->in[0], NULL, NULL, r->scores, r->attn};
    if (r->width == 0) /* the heads form has one input, x */
        g[1] = nd->in[1], g[2] = nd->in[2];
    for (int i = 0; i < 5; i++)
        if (g[i] != NULL &&
            ((r->ids != NULL && i < 3) || !(job.zero[i] = qkv_tensor_grad_claim(g[i]))))
            qkv_tensor_grad_ready(g[i]);
    if (r->width != 0) {
        qkv_parallel_for(items, items * item_work(r), r->parts, backward_heads_items, &job);
        return;
    }
    /* the items of the plain form write their own slices of the gradients
     * and run on any thread; the embedded form adds every item into the
     * same tables, in item order, so it runs on one */
    qkv_parallel_for(items, items * item_work(r), r->ids != NULL ? 1 : r->parts, backward_items,
                     &job);
}

/* Nonzero when q, k and v have 2 to 4 dimensions, the same leading ones,
 * and matching inner sizes. */
static int attn_shapes_ok(const qkv_tensor *q, const qkv_tensor *k, const qkv_tensor *v)
{
    int n = q->ndim;
    if (n < 2 || n > 4 || k->ndim != n || v->ndim != n)
        return 0;
    for (int i = 0; i < n - 2; i++)
        if (k->shape[i] != q->shape[i] || v->shape[i] != q->shape[i])
            return 0;
    return k->shape[n - 1] == q->shape[n - 1] && v->shape[n - 2] == k->shape[n - 2];
}

/* Clears parts, then checks the tape, that no input is nil, and that no
 * input or mask was kept across a reset. */
static int attn_inputs_ok(qkv_tape *t, const char *name, const qkv_tensor *q, const qkv_tensor *k,
                          const qkv_tensor *v, const qkv_tensor *mask, qkv_attention_parts *parts)
{
    if (parts != NULL)
        parts->scores = parts->attn = qkv_nil();
    return qkv_op_inputs_ok(t, name, q, k, 1) && qkv_op_inputs_ok(t, name, v, NULL, 0) &&
           qkv_op_fresh(t, name, mask);
}

/* Three shapes as text, for an error message. */
typedef struct shapes3 {
    char s[3][64];
} shapes3;

static shapes3 shapes_of(const qkv_tensor *a, const qkv_tensor *b, const qkv_tensor *c)
{
    shapes3 n;
    qkv_shape_str(a, n.s[0], sizeof n.s[0]);
    qkv_shape_str(b, n.s[1], sizeof n.s[1]);
    qkv_shape_str(c, n.s[2], sizeof n.s[2]);
    return n;
}

/* The node's record, or NULL after recording an error (a scale that is
 * not finite is refused, as qkv_scale refuses it). */
static attn_rec *new_rec(qkv_tape *t, const char *name, qkv_tensor *v, const qkv_tensor *mask,
                         double scale)
{
    if (!isfinite(scale)) {
        char num[32];
        qkv_tape_fail(t, QKV_ERR_ARG, "%s: the scale %s is not finite", name,
                      qkv_num_str(num, sizeof num, scale));
        return NULL;
    }
    attn_rec *r = qkv_op_alloc(t, name, sizeof *r);
    if (r != NULL) {
        memset(r, 0, sizeof *r);
        r->v = v;
        r->mask = mask;
        r->scale = scale;
    }
    return r;
}

/* qkv_attention and qkv_attention_online, by their op's definition. */
static qkv_tensor *attention_plain(qkv_tape *t, const qkv_op_def *def, int online, int causal,
                                   qkv_tensor *q, qkv_tensor *k, qkv_tensor *v,
                                   const qkv_tensor *mask, double scale, qkv_attention_parts *parts)
{
    const char *name = def->name;
    if (!attn_inputs_ok(t, name, q, k, v, mask, parts))
        return qkv_nil();
    if (!attn_shapes_ok(q, k, v)) {
        shapes3 n = shapes_of(q, k, v);
        qkv_tape_fail(t, QKV_ERR_SHAPE,
                      "%s: q %s, k %s, v %s: need [...,Tq,d], [...,Tk,d] and [...,Tk,dv] "
                      "with the same leading dimensions",
                      name, n.s[0], n.s[1], n.s[2]);
        return qkv_nil();
    }
    attn_rec *r = new_rec(t, name, v, mask, scale);
    if (r == NULL)
        return qkv_nil();
    const int nd = q->ndim;
    r->tq = q->shape[nd - 2];
    r->tk = k->shape[nd - 2];
    r->dk = q->shape[nd - 1];
    r->dv = v->shape[nd - 1];
    r->online = online;
    r->causal = causal;
    return attn_run(t, def, r, q, k, nd, q->shape, parts);
}

qkv_tensor *qkv_attention(qkv_tape *t, qkv_tensor *q, qkv_tensor *k, qkv_tensor *v,
                          const qkv_tensor *mask, double scale, qkv_attention_parts *parts)
{
    return attention_plain(t, &op_attention[ATTN_PLAIN], 0, 0, q, k, v, mask, scale, parts);
}

qkv_tensor *qkv_attention_online(qkv_tape *t, qkv_tensor *q, qkv_tensor *k, qkv_tensor *v,
                                 const qkv_tensor *mask, double scale, int causal)
{
    return attention_plain(t, &op_attention[ATTN_ONLINE], 1, causal != 0, q, k, v, mask, scale,
                           NULL);
}

/* qkv_embed_attention, and with rows set its rows form (query rows). */
static qkv_tensor *embed_attention(qkv_tape *t, const qkv_op_def *def, qkv_tensor *wq,
                                   qkv_tensor *wk, qkv_tensor *wv, const int *ids, int B, int T,
                                   const qkv_tensor *mask, double scale, int rows_form,
                                   const int *query, qkv_attention_parts *parts)
{
    const char *name = def->name;
    if (!attn_inputs_ok(t, name, wq, wk, wv, mask, parts))
        return qkv_nil();
    if (ids == NULL) { /* a missing argument, not a shape */
        qkv_tape_fail(t, QKV_ERR_ARG, "%s: no ids (ids is NULL)", name);
        return qkv_nil();
    }
    if (rows_form && query == NULL) {
        qkv_tape_fail(t, QKV_ERR_ARG, "%s: no query rows", name);
        return qkv_nil();
    }
    if (wq->ndim != 2 || wk->ndim != 2 || wv->ndim != 2 || wq->shape[1] != wk->shape[1] || B < 1 ||
        T < 1) {
        shapes3 n = shapes_of(wq, wk, wv);
        qkv_tape_fail(t, QKV_ERR_SHAPE,
                      "%s: tables %s, %s, %s with ids [%d,%d]: need [V,d], [V,d], [V,dv] and "
                      "B, T >= 1",
                      name, n.s[0], n.s[1], n.s[2], B, T);
        return qkv_nil();
    }
    int rows = wq->shape[0] < wk->shape[0] ? wq->shape[0] : wk->shape[0];
    rows = wv->shape[0] < rows ? wv->shape[0] : rows;
    const size_t n = (size_t)B * (size_t)T, bad = qkv_first_bad_id(ids, n, rows);
    if (bad < n) {
        qkv_tape_fail(t, QKV_ERR_ARG, "%s: id %d at position %zu is outside [0,%d) of the tables",
                      name, ids[bad], bad, rows);
        return qkv_nil();
    }
    if (query != NULL)
        for (int b = 0; b < B; b++)
            if (query[b] < 0 || query[b] >= T) {
                qkv_tape_fail(t, QKV_ERR_ARG, "%s: query row %d of item %d is outside [0,%d)", name,
                              query[b], b, T);
                return qkv_nil();
            }
    attn_rec *r = new_rec(t, name, wv, mask, scale);
    if (r == NULL || (r->ids = qkv_tape_ints(t, name, ids, n)) == NULL ||
        (query != NULL && (r->query = qkv_tape_ints(t, name, query, (size_t)B)) == NULL))
        return qkv_nil();
    r->tq = r->tk = T;
    r->dk = wq->shape[1];
    r->dv = wv->shape[1];
    return attn_run(t, def, r, wq, wk, 3, (const int[]){B}, parts);
}

qkv_tensor *qkv_embed_attention(qkv_tape *t, qkv_tensor *wq, qkv_tensor *wk, qkv_tensor *wv,
                                const int *ids, int B, int T, const qkv_tensor *mask, double scale,
                                qkv_attention_parts *parts)
{
    return embed_attention(t, &op_attention[ATTN_EMBED], wq, wk, wv, ids, B, T, mask, scale, 0,
                           NULL, parts);
}

qkv_tensor *qkv_embed_attention_rows(qkv_tape *t, qkv_tensor *wq, qkv_tensor *wk, qkv_tensor *wv,
                                     const int *ids, int B, int T, const qkv_tensor *mask,
                                     double scale, const int *query, qkv_attention_parts *parts)
{
    return embed_attention(t, &op_attention[ATTN_EMBED_ROWS], wq, wk, wv, ids, B, T, mask, scale, 1,
                           query, parts);
}

/* qkv_attention_heads and qkv_attention_heads_online, by their op's
 * definition. */
static qkv_tensor *attention_heads(qkv_tape *t, const qkv_op_def *def, int online, int causal,
                                   qkv_tensor *x, int heads, const qkv_tensor *mask, double scale,
                                   qkv_attention_parts *parts)
{
    const char *name = def->name;
    if (!attn_inputs_ok(t, name, x, x, x, mask, parts))
        return qkv_nil();
    if (x->ndim != 3 || heads < 1 || x->shape[2] % 3 != 0 || (x->shape[2] / 3) % heads != 0) {
        char sx[64];
        qkv_shape_str(x, sx, sizeof sx);
        qkv_tape_fail(t, QKV_ERR_SHAPE,
                      "%s: x %s, heads %d: need [B,T,3D] with D a multiple of the heads", name, sx,
                      heads);
        return qkv_nil();
    }
    attn_rec *r = new_rec(t, name, x, mask, scale);
    if (r == NULL)
        return qkv_nil();
    const int B = x->shape[0], T = x->shape[1];
    r->width = x->shape[2] / 3;
    r->tq = r->tk = T;
    r->dk = r->dv = r->width / heads;
    r->online = online;
    r->causal = causal;
    return attn_run(t, def, r, x, x, 4, (const int[]){B, heads}, parts);
}

qkv_tensor *qkv_attention_heads(qkv_tape *t, qkv_tensor *x, int heads, const qkv_tensor *mask,
                                double scale, qkv_attention_parts *parts)
{
    return attention_heads(t, &op_attention[ATTN_HEADS], 0, 0, x, heads, mask, scale, parts);
}

qkv_tensor *qkv_attention_heads_online(qkv_tape *t, qkv_tensor *x, int heads,
                                       const qkv_tensor *mask, double scale, int causal)
{
    return attention_heads(t, &op_attention[ATTN_HEADS_ONLINE], 1, causal != 0, x, heads, mask,
                           scale, NULL);
}
