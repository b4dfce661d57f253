/*
 * ops.h - differentiable operations recorded on a tape.
 *
 * Every op takes the tape first, then its inputs, then its constants. It
 * checks shapes, computes the output in the tape's arena and, while the tape
 * records gradients, appends a node whose backward pass qkv_backward runs.
 * On any error (including an earlier one on the same tape) an op returns the
 * nil tensor, records the first error with a message naming the op and the
 * shapes, and does nothing else. No op ever aborts or exits.
 *
 * Shapes are written as [d0,d1,...]; "..." stands for any leading batch
 * dimensions. Outputs carry a gradient only if some input does.
 *
 * The ops come in families, one source file each under src/ops/, where
 * each op's backward pass sits next to its forward pass.
 */
#ifndef QKV_OPS_H
#define QKV_OPS_H

#include "qkv/tape.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Target value that cross-entropy skips. */
#define QKV_IGNORE (-1)

/* ---- linear algebra (src/ops/linalg.c) -------------------------------- */

/* C = A·B. a: [...,m,k]; b: [...,k,n] with the same leading dimensions, or
 * [k,n] shared by every batch item. Returns [...,m,n]. */
qkv_tensor *qkv_matmul(qkv_tape *t, qkv_tensor *a, qkv_tensor *b);

/* C = A·Bᵀ (as in Q·Kᵀ). a: [...,m,k]; b: [...,n,k] or [n,k]. Returns
 * [...,m,n]. */
qkv_tensor *qkv_matmul_nt(qkv_tape *t, qkv_tensor *a, qkv_tensor *b);

/* Swaps the last two dimensions: [...,m,n] -> [...,n,m]. Needs ndim >= 2. */
qkv_tensor *qkv_transpose(qkv_tape *t, qkv_tensor *x);

/* ---- element-wise (src/ops/elementwise.c) ----------------------------- */

/* y = c·x. */
qkv_tensor *qkv_scale(qkv_tape *t, qkv_tensor *x, double c);

/* y = a + b, where b broadcasts to a's shape: b's dimensions, aligned on
 * the right, each equal a's or are 1 (a bias row [n] over [...,n]). */
qkv_tensor *qkv_add(qkv_tape *t, qkv_tensor *a, qkv_tensor *b);

/* y = a ⊙ b, element-wise, b broadcast to a as in qkv_add. */
qkv_tensor *qkv_mul(qkv_tape *t, qkv_tensor *a, qkv_tensor *b);

/* Additive mask: y = x + m, where m broadcasts to x as in qkv_add and holds
 * 0 (keep) or -INFINITY (drop). m receives no gradient. */
qkv_tensor *qkv_mask(qkv_tape *t, qkv_tensor *x, const qkv_tensor *m);

/* Element-wise tanh and relu. relu's gradient at 0 is taken as 0. */
qkv_tensor *qkv_tanh(qkv_tape *t, qkv_tensor *x);
qkv_tensor *qkv_relu(qkv_tape *t, qkv_tensor *x);

/* y = e^x, element-wise (libm's exp, rounded once); e^x overflows to +inf
 * above about 88.7 in float32. dx = dy·y. */
qkv_tensor *qkv_exp(qkv_tape *t, qkv_tensor *x);

/* ---- reductions (src/ops/reduce.c) ------------------------------------ */

/* Sum and mean of all elements: returns a scalar (ndim 0). Accumulates in
 * double. */
qkv_tensor *qkv_sum(qkv_tape *t, qkv_tensor *x);
qkv_tensor *qkv_mean(qkv_tape *t, qkv_tensor *x);

/* Sum and mean along the last dimension: [...,n] -> [...]. A 1-D input
 * gives a scalar. */
qkv_tensor *qkv_sum_last(qkv_tape *t, qkv_tensor *x);
qkv_tensor *qkv_mean_last(qkv_tape *t, qkv_tensor *x);

/* ---- indexing (src/ops/index.c) --------------------------------------- */

/* Row gather (embedding lookup; one-hot·W). w: [V,D]; ids holds
 * numel(shape) integers in [0,V), copied onto the tape. Returns
 * [shape...,D] with out[i,:] = w[ids[i],:]. ndim is 1..3. Backward
 * scatter-adds into the rows of w. */
qkv_tensor *qkv_gather(qkv_tape *t, qkv_tensor *w, const int *ids, int ndim, const int *shape);

/* Picks one row per batch item. x: [B,T,D]; idx holds B positions in
 * [0,T). Returns [B,D] with out[b,:] = x[b,idx[b],:]. */
qkv_tensor *qkv_pick_rows(qkv_tape *t, qkv_tensor *x, const int *idx);

/* ---- softmax (src/ops/softmax.c) -------------------------------------- */

/* Softmax over the last dimension, with the row maximum subtracted first.
 * A row whose every entry is -inf (fully masked) gives all zeros and passes
 * no gradient. */
qkv_tensor *qkv_softmax(qkv_tape *t, qkv_tensor *x);

/* log(softmax(x)) over the last dimension, computed stably. A fully masked
 * row gives -inf everywhere and passes no gradient. */
qkv_tensor *qkv_log_softmax(qkv_tape *t, qkv_tensor *x);

/* ---- losses (src/ops/loss.c) ------------------------------------------ */

/* Mean cross-entropy of logits [...,C] against integer targets, one per
 * row, fused with log-softmax: loss = -mean log p[target]. Rows whose target
 * is QKV_IGNORE are skipped and not counted; if every row is skipped the
 * loss is 0. Gradient: (p - onehot(target)) / N, N = rows counted. Returns a
 * scalar. */
qkv_tensor *qkv_cross_entropy(qkv_tape *t, qkv_tensor *logits, const int *targets);

/* ---- attention (src/ops/attention.c) ---------------------------------- */

/* What qkv_attention computes on the way to its output. */
typedef struct qkv_attention_parts {
    qkv_tensor *scores; /* [...,Tq,Tk] scale·Q·Kᵀ, before the mask */
    qkv_tensor *attn;   /* [...,Tq,Tk] the softmax rows; masked keys get 0 */
} qkv_attention_parts;

/* Fused scaled dot-product attention: O = softmax(scale·Q·Kᵀ + M)·V.
 * q: [...,Tq,dk]; k: [...,Tk,dk]; v: [...,Tk,dv], all with the same
 * leading dimensions (2 to 4 dimensions in all). mask is NULL or an
 * additive mask (0 keeps, -INFINITY drops; no gradient) that broadcasts to
 * [...,Tq,Tk] as in qkv_add. Returns O: [...,Tq,dv]. If parts is not NULL
 * it receives the scores and the attention weights; they are ordinary tape
 * tensors, so other ops may use them and their gradients flow back, and
 * after qkv_backward their grads hold dL/dscores and dL/dattn.
 *
 * The result and every gradient equal, bit for bit, those of
 * qkv_matmul_nt, qkv_scale, qkv_mask, qkv_softmax and qkv_matmul recorded
 * one after the other (with a scale of 1 standing for no qkv_scale); the
 * fused op keeps each item in cache, records one node instead of five and
 * skips the rows of zeros that picking rows from O leaves in its gradient. */
qkv_tensor *qkv_attention(qkv_tape *t, qkv_tensor *q, qkv_tensor *k, qkv_tensor *v,
                          const qkv_tensor *mask, double scale, qkv_attention_parts *parts);

/* Attention over embedded tokens, fused with the lookups: the same numbers
 * as qkv_attention(t, gather(wq), gather(wk), gather(wv), mask, scale,
 * parts) with each gather a qkv_gather of ids shaped [B,T], without making
 * Q, K and V as tensors. wq, wk: [V,dk]; wv: [V,dv]; ids: B·T integers,
 * copied onto the tape, each below the row count of every table. Returns
 * [B,T,dv]; the scores and weights are [B,T,T]. Backward adds into the rows
 * of the tables' gradients, in the order the gathers would. */
qkv_tensor *qkv_embed_attention(qkv_tape *t, qkv_tensor *wq, qkv_tensor *wk, qkv_tensor *wv,
                                const int *ids, int B, int T, const qkv_tensor *mask, double scale,
                                qkv_attention_parts *parts);

#ifdef __cplusplus
}
#endif
#endif
