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

#include "qkv/rng.h"
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

/* y = x·W + b, a linear layer's map (PyTorch's F.linear with W stored
 * transposed). x: [...,k]; w: [k,n]; b: [n] or NULL. Returns [...,n]. All
 * rows of x go through one product, so W is packed once rather than once
 * per batch item as qkv_matmul's shared-B form does, and the bias is added
 * in place rather than through a second tensor. */
qkv_tensor *qkv_affine(qkv_tape *t, qkv_tensor *x, qkv_tensor *w, qkv_tensor *b);

/* Swaps the last two dimensions: [...,m,n] -> [...,n,m]. Needs ndim >= 2. */
qkv_tensor *qkv_transpose(qkv_tape *t, qkv_tensor *x);

/* ---- element-wise (src/ops/elementwise.c) ----------------------------- */

/* y = a + b, a - b, a ⊙ b, a / b, with numpy broadcasting of both: the
 * shapes, aligned on the right, agree where each has a dimension, or one of
 * them is 1 there, and the result takes the larger of each ([B,T,D] + [D],
 * [3,1] ⊙ [1,4] = [3,4]). Each backward sums an operand's gradient over
 * the dimensions it was broadcast along. x/0 is ±inf or NaN, as in IEEE. */
qkv_tensor *qkv_add(qkv_tape *t, qkv_tensor *a, qkv_tensor *b);
qkv_tensor *qkv_sub(qkv_tape *t, qkv_tensor *a, qkv_tensor *b);
qkv_tensor *qkv_mul(qkv_tape *t, qkv_tensor *a, qkv_tensor *b);
qkv_tensor *qkv_div(qkv_tape *t, qkv_tensor *a, qkv_tensor *b);

/* y = c·x (c rounded once per value, from double; a c that is not
 * finite is refused with QKV_ERR_ARG) and y = -x. */
qkv_tensor *qkv_scale(qkv_tape *t, qkv_tensor *x, double c);
qkv_tensor *qkv_neg(qkv_tape *t, qkv_tensor *x);

/* Additive mask: y = x + m, where m broadcasts to x's shape (never the
 * other way) and holds 0 (keep) or -INFINITY (drop); other values are not
 * checked, and are added as they are. m receives no gradient, and nothing
 * flows back through a dropped entry. */
qkv_tensor *qkv_mask(qkv_tape *t, qkv_tensor *x, const qkv_tensor *m);

/* Element-wise maps, each with its gradient:
 *   exp      e^x; overflows to +inf above about 88.7 (float32;   dx = dy·y
 *            709.8 in the double build)
 *   log      ln x; log 0 = -inf, log of a negative is NaN        dx = dy/x
 *   sqrt     √x; √0 = 0 with gradient dy/0 = inf (as PyTorch)    dx = dy/(2y)
 *   tanh     exactly ±1 at ±1e4 and ±inf                         dx = dy·(1 - y²)
 *   sigmoid  1/(1 + e^-x), exactly 0 and 1 at ∓1e4 and ∓inf     dx = dy·y·(1 - y)
 *   relu     max(x, 0); the gradient at ±0 is 0; -0 stays -0    dx = dy·[x > 0]
 *            and NaN stays NaN, passing dy back (as PyTorch)
 *   gelu     x/2·(1 + tanh(√(2/π)(x + 0.044715x³))), GPT-2's;    dx = dy·gelu'(x)
 *            x and 0 at ±1e4 (gradients 1 and 0); +inf and -0 at
 *            ±inf, gradients 1 and 0 (PyTorch: NaN at -inf, and
 *            gradients NaN at both)
 *   silu     x·σ(x); NaN at -inf, gradient NaN at ±inf,          dx = dy·(σ + y(1 - σ))
 *            as in PyTorch
 *   abs      |x|; -0 gives +0 and NaN stays NaN. The gradient    dx = dy·sign(x)
 *            at ±0 is 0 (the middle of the subgradients
 *            [-1, 1], and PyTorch's), and 0 at NaN (PyTorch's)
 * The vector kernels compute exp, log, tanh, sigmoid and GELU within a few
 * ulp of libm (test_kernels states the bounds). */
qkv_tensor *qkv_exp(qkv_tape *t, qkv_tensor *x);
qkv_tensor *qkv_log(qkv_tape *t, qkv_tensor *x);
qkv_tensor *qkv_sqrt(qkv_tape *t, qkv_tensor *x);
qkv_tensor *qkv_tanh(qkv_tape *t, qkv_tensor *x);
qkv_tensor *qkv_sigmoid(qkv_tape *t, qkv_tensor *x);
qkv_tensor *qkv_relu(qkv_tape *t, qkv_tensor *x);
qkv_tensor *qkv_gelu(qkv_tape *t, qkv_tensor *x);
qkv_tensor *qkv_silu(qkv_tape *t, qkv_tensor *x);
qkv_tensor *qkv_abs(qkv_tape *t, qkv_tensor *x);

/* y = log(1 + e^x), PyTorch's F.softplus at beta = 1, computed in double
 * as max(x, 0) + log1p(e^-|x|) for every x and rounded once: 1e4 and 0 at
 * ±1e4, +inf and 0 at ±inf, NaN at NaN. dx = dy·σ(x), σ taken stably in
 * double (1 and 0 at ±inf, NaN at NaN, as in PyTorch). PyTorch returns x
 * itself above its threshold of 20 (x = 20 included in the formula), with
 * gradient 1; qkv does not cut there. In float the two agree to the bit
 * (past 20, e^-x is below half an ulp of x and 1 - σ(x) below half an ulp
 * of 1); in double qkv keeps the e^-x that PyTorch drops (1.4e-11 at 25,
 * a jump of 2.1e-9 just past 20 in PyTorch's). */
qkv_tensor *qkv_softplus(qkv_tape *t, qkv_tensor *x);

/* y = x for x > 0, else slope·x (PyTorch's F.leaky_relu with
 * negative_slope = slope; any finite slope, 0 or negative included, is
 * rounded to qkv_real once). dx = dy for x > 0, else slope·dy: the
 * gradient at ±0 and at NaN is the slope, as PyTorch 1.13 gives it. -0
 * gives slope·-0 (-0 for a positive slope), NaN stays NaN, and -inf gives
 * slope·-inf (NaN for slope 0), all as in PyTorch. A slope that is not
 * finite, or not once rounded to qkv_real (1e300 in the float build), is
 * refused with QKV_ERR_ARG (PyTorch's float32 refuses that one too). */
qkv_tensor *qkv_leaky_relu(qkv_tape *t, qkv_tensor *x, double slope);

/* y = x^p for a constant p (libm's pow: a finite negative x with a
 * fractional p gives NaN; -inf gives +inf or +0, as PyTorch does except
 * at p = ±0.5, which it takes as a square root, giving NaN). dx =
 * dy·p·x^(p-1), and 0 for p = 0. A p that is not finite is refused with
 * QKV_ERR_ARG, as qkv_scale refuses its factor. */
qkv_tensor *qkv_pow(qkv_tape *t, qkv_tensor *x, double p);

/* y = min(max(x, lo), hi), PyTorch's clamp with constant bounds; lo may
 * be -INFINITY and hi INFINITY (no bound on that side). dx = dy where lo
 * <= x <= hi, the bounds included (PyTorch's), and 0 elsewhere. NaN stays
 * NaN and passes no gradient (as in PyTorch). The bounds are rounded to
 * qkv_real once. A NaN bound, or lo > hi, is refused with QKV_ERR_ARG
 * (PyTorch takes lo > hi and gives hi everywhere); lo == hi is taken. */
qkv_tensor *qkv_clamp(qkv_tape *t, qkv_tensor *x, double lo, double hi);

/* ---- shapes and views (src/ops/shape.c) ------------------------------- */

/* The same values in a new shape of ndim dimensions, one of which may be
 * -1 (inferred). A view, not a copy: the result shares x's data, and its
 * gradient too while recording, so writing through it changes x and
 * gradients flow back with no node. Valid until the tape is reset. */
qkv_tensor *qkv_reshape(qkv_tape *t, qkv_tensor *x, int ndim, const int *shape);

/* Reorders the dimensions: the result's dimension i is x's perm[i]
 * (negative entries count from the end), e.g. {0,2,1,3} turns [B,T,H,d]
 * into [B,H,T,d]. A copy; backward permutes the gradient back. */
qkv_tensor *qkv_permute(qkv_tape *t, qkv_tensor *x, const int *perm);

/* Swaps dimensions d0 and d1 (negative counts from the end): a permute. */
qkv_tensor *qkv_swapdims(qkv_tape *t, qkv_tensor *x, int d0, int d1);

/* Joins n tensors (1 to QKV_CONCAT_MAX) along dim (negative counts from
 * the end); all other sizes must agree. (An RNN stacks its states with
 * it, one per step.) */
#define QKV_CONCAT_MAX 65536
qkv_tensor *qkv_concat(qkv_tape *t, int n, qkv_tensor *const *xs, int dim);

/* Joins n tensors (1 to QKV_CONCAT_MAX) of one shape along a new
 * dimension dim of the result, as torch.stack: [d0,d1] stacked along 1
 * gives [d0,n,d1], with entry k of the new dimension xs[k]. dim counts
 * in the result, from -(ndim+1) to ndim for inputs of ndim dimensions
 * (negative from its end, so -1 puts the new one last); the result has
 * at most QKV_MAX_DIMS. A copy; backward gives each input its slice of
 * the gradient (added twice for a tensor passed twice). Inputs of other
 * shapes (QKV_ERR_SHAPE, naming both), a result over QKV_MAX_DIMS
 * (QKV_ERR_SHAPE), a dim out of that range, a NULL array or n out of
 * range (QKV_ERR_ARG) are refused. */
qkv_tensor *qkv_stack(qkv_tape *t, int n, qkv_tensor *const *xs, int dim);

/* The len entries from start along dim (negative counts from the end):
 * [..., start:start+len, ...]. start is counted from 0 (a negative start
 * is refused, not counted from the end as torch.narrow counts it), and
 * len is at least 1. */
qkv_tensor *qkv_slice(qkv_tape *t, qkv_tensor *x, int dim, int start, int len);

/* ---- recurrence (src/ops/recurrent.c) --------------------------------- */

/* The Elman recurrence over a whole sequence, as one node: for s = 0..T-1,
 * h_s = act(xw[s] + h_{s-1}·W_h), with h_{-1} = h0, or no term at all when
 * h0 is NULL (a zero state). xw: [T,B,H], the inputs' projections with
 * their bias; wh: [H,H]; h0: [B,H] or NULL; act is tanh when tanh_act is
 * nonzero, else the identity. Returns every state, [T,B,H]. The forward
 * pass gives the bits of the same steps written as qkv_matmul, qkv_add and
 * qkv_tanh; backward runs through time once and makes W_h's gradient in one
 * product over all the steps (and one more for h0). qkv_rnn_forward (layers.h) uses it. */
qkv_tensor *qkv_rnn_scan(qkv_tape *t, qkv_tensor *xw, qkv_tensor *wh, qkv_tensor *h0, int tanh_act);

/* ---- reductions (src/ops/reduce.c) ------------------------------------ */

/* Sum and mean of all elements: returns a scalar (ndim 0). Accumulates in
 * double. */
qkv_tensor *qkv_sum(qkv_tape *t, qkv_tensor *x);
qkv_tensor *qkv_mean(qkv_tape *t, qkv_tensor *x);

/* Sum, mean, maximum and minimum along dimension dim (negative counts
 * from the end): the dimension goes, or stays with size 1 when keepdim is
 * nonzero ([B,T,D] -> [B,T] or [B,T,1]). Sums accumulate in double.
 * max_dim's gradient goes to the first maximum, min_dim's to the first
 * minimum; a NaN counts as the maximum and as the minimum (the first NaN
 * along dim), as torch.max and torch.min count it. */
qkv_tensor *qkv_sum_dim(qkv_tape *t, qkv_tensor *x, int dim, int keepdim);
qkv_tensor *qkv_mean_dim(qkv_tape *t, qkv_tensor *x, int dim, int keepdim);
qkv_tensor *qkv_max_dim(qkv_tape *t, qkv_tensor *x, int dim, int keepdim);
qkv_tensor *qkv_min_dim(qkv_tape *t, qkv_tensor *x, int dim, int keepdim);

/* The index along dimension dim (negative counts from the end) of the
 * first maximum, for every other position of x, as torch.argmax(x, dim):
 * a NaN counts as the maximum (the first NaN), so a column of -inf gives
 * 0. Writes numel(x)/size(dim) ints into out, in the order of max_dim's
 * result, and nothing past them; cap is out's room, in ints.
 *
 * Not an op: indices have no gradient, so nothing goes on a tape, and x
 * may be any tensor (a parameter, a heap tensor, a tape's). It reports as
 * every function outside a tape does (base.h): a status, and err (which
 * may be NULL) set on failure. The arguments run input, dim, then the
 * output with its room (as qkv_st_read's out and n), then err: a NULL or
 * nil x, a dim out of range, a NULL out or a cap below the count are
 * QKV_ERR_ARG, a scalar x (nothing to reduce, as max_dim says; torch
 * gives 0) QKV_ERR_SHAPE, each with a message naming argmax_dim and x's
 * shape; out is then not written. */
qkv_status qkv_argmax_dim(const qkv_tensor *x, int dim, int *out, size_t cap, qkv_error *err);

/* The same for the first minimum, as torch.argmin(x, dim): a NaN counts
 * as the minimum (the first NaN), and ties go to the first, so a column
 * of +inf gives 0. The contract is argmax_dim's, its messages naming
 * argmin_dim. */
qkv_status qkv_argmin_dim(const qkv_tensor *x, int dim, int *out, size_t cap, qkv_error *err);

/* log Σ e^x along dimension dim (torch.logsumexp), dim and keepdim as
 * above. Stable: the largest entry m is subtracted first, y = m +
 * log Σ e^(x - m), summed in double, so 1e4 or -1e4 give no overflow or
 * underflow. dx = dy·e^(x - y), the softmax along dim, which backward
 * takes from the sum computed again. Edges: a row of -inf gives -inf
 * and no gradient (PyTorch: NaN gradients), as qkv_softmax's masked row;
 * +inf gives +inf, with gradient NaN at the +inf entries and 0 at the
 * others; a NaN gives NaN and NaN gradients (all three as in PyTorch). */
qkv_tensor *qkv_logsumexp_dim(qkv_tape *t, qkv_tensor *x, int dim, int keepdim);

/* The variance along dimension dim (torch.var(x, dim, correction=...,
 * keepdim=...)), dim and keepdim as above: Σ(x - mean)²/(n - correction)
 * over the n entries, in two passes in double (the mean first, then the
 * squares about it), so an offset far from 0 costs no digits. correction
 * is 0 (the population variance) or 1 (Bessel's, torch's default); other
 * values are QKV_ERR_ARG. A dim of size n <= correction (one entry with
 * correction 1), where torch gives NaN and a warning, is refused with
 * QKV_ERR_SHAPE naming the shape. dx = dy·2(x - mean)/(n - correction),
 * the mean taken again in backward. An infinity or a NaN along dim gives
 * NaN, and gradients ±inf and NaN there, as in PyTorch. */
qkv_tensor *qkv_var_dim(qkv_tape *t, qkv_tensor *x, int dim, int correction, int keepdim);

/* Sum and mean along the last dimension: [...,n] -> [...]; a 1-D input
 * gives a scalar. Shorthands for sum_dim and mean_dim(x, -1, 0). */
qkv_tensor *qkv_sum_last(qkv_tape *t, qkv_tensor *x);
qkv_tensor *qkv_mean_last(qkv_tape *t, qkv_tensor *x);

/* ---- normalisation (src/ops/norm.c) ----------------------------------- */

/* Layer norm over the last dimension D: y = (x - μ)/√(σ² + eps)·γ + β, with
 * μ and σ² the mean and (biased) variance of each row. gamma and beta are
 * [D] or NULL (1 and 0). The forward keeps each row's μ and 1/σ; the
 * backward is the fused closed form. μ, σ² and the backward's two means are
 * summed in qkv_real, in 32 (forward) or 16 (backward) partial sums: about
 * d/32 + 5 roundings, as PyTorch's float layer norm. An eps that is
 * negative or not finite is refused with QKV_ERR_ARG (PyTorch takes it). */
qkv_tensor *qkv_layer_norm(qkv_tape *t, qkv_tensor *x, qkv_tensor *gamma, qkv_tensor *beta,
                           double eps);

/* RMS norm over the last dimension: y = x/√(mean(x²) + eps)·γ, gamma [D]
 * or NULL. eps as for qkv_layer_norm. */
qkv_tensor *qkv_rms_norm(qkv_tape *t, qkv_tensor *x, qkv_tensor *gamma, double eps);

/* ---- indexing (src/ops/index.c) --------------------------------------- */

/* Row gather (embedding lookup; one-hot·W). w: [V,D]; ids holds
 * numel(shape) integers in [0,V), copied onto the tape. Returns
 * [shape...,D] with out[i,:] = w[ids[i],:]. ndim is 1..3. Backward
 * scatter-adds into the rows of w. NULL ids, or an id outside [0,V):
 * QKV_ERR_ARG; a table that is not 2-D or a wrong ids shape:
 * QKV_ERR_SHAPE. */
qkv_tensor *qkv_gather(qkv_tape *t, qkv_tensor *w, const int *ids, int ndim, const int *shape);

/* Picks one row per batch item. x: [B,T,D]; idx holds B positions in
 * [0,T). Returns [B,D] with out[b,:] = x[b,idx[b],:]. NULL idx, or a
 * position outside [0,T): QKV_ERR_ARG; x not 3-D: QKV_ERR_SHAPE. */
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
 * scalar. NULL targets, or a target outside [0,C) that is not QKV_IGNORE:
 * QKV_ERR_ARG. */
qkv_tensor *qkv_cross_entropy(qkv_tape *t, qkv_tensor *logits, const int *targets);

/* qkv_cross_entropy with label smoothing, as PyTorch's F.cross_entropy(...,
 * label_smoothing=eps): each counted row adds (1-eps)·(-log p[target]) +
 * eps·mean_c(-log p_c), and the loss is their mean over the rows counted
 * (QKV_IGNORE rows skipped; every row skipped: 0). Gradient:
 * (p - (1-eps)·onehot(target) - eps/C) / N. eps = 0 gives qkv_cross_entropy's
 * loss and gradient to the last bit. Logits of ±1e4 stay finite; a -inf
 * logit in a counted row makes the loss +inf for eps > 0 (its -log p is
 * infinite) while the gradient stays finite, as in PyTorch 1.13. eps outside
 * [0, 1] or NaN: QKV_ERR_ARG; otherwise as qkv_cross_entropy, errors naming
 * cross_entropy_smooth. */
qkv_tensor *qkv_cross_entropy_smooth(qkv_tape *t, qkv_tensor *logits, const int *targets,
                                     double eps);

/* Mean squared error: mean((pred - target)²), a scalar. target has pred's
 * shape and takes no gradient. */
qkv_tensor *qkv_mse(qkv_tape *t, qkv_tensor *pred, const qkv_tensor *target);

/* Binary cross-entropy on logits: mean of -[y·log σ(x) + (1-y)·log(1-σ(x))]
 * computed as max(x,0) - x·y + log(1 + e^-|x|), finite for any finite x
 * (±1e4 included); an infinite x gives the limit, 0 where its target is
 * met exactly (x = +inf, y = 1; x = -inf, y = 0), else +inf for y in
 * [0, 1]. target (y, usually 0 or 1) takes no gradient.
 * dx = (σ(x) - y)/N. */
qkv_tensor *qkv_bce_with_logits(qkv_tape *t, qkv_tensor *logits, const qkv_tensor *target);

/* Mean absolute error: mean |pred - target| (PyTorch's F.l1_loss), a
 * scalar, summed in double. target has pred's shape and takes no
 * gradient. dpred = dL·sign(pred - target)/N, 0 where they are equal (as
 * PyTorch), and 0 where the difference is NaN (a NaN entry, or inf - inf;
 * the loss is NaN then), as PyTorch gives it. */
qkv_tensor *qkv_l1_loss(qkv_tape *t, qkv_tensor *pred, const qkv_tensor *target);

/* Huber loss (PyTorch's F.huber_loss): the mean over entries of d²/2
 * where |d| < delta, else delta·(|d| - delta/2), d = pred - target, in
 * double; a scalar. target has pred's shape and takes no gradient.
 * dpred = dL·clamp(d, -delta, delta)/N: the two pieces meet at |d| =
 * delta in value and gradient. A NaN d gives a NaN loss and a NaN
 * gradient there, as in PyTorch. delta must be positive and finite:
 * QKV_ERR_ARG otherwise (PyTorch refuses delta <= 0 too, and takes
 * +inf, half the squared error). */
qkv_tensor *qkv_huber_loss(qkv_tape *t, qkv_tensor *pred, const qkv_tensor *target, double delta);

/* ---- regularisation (src/ops/dropout.c) ------------------------------- */

/* Inverted dropout: each value is zeroed with probability p (one draw of
 * rng per value, in order) and the rest are scaled by 1/(1-p). Returns x
 * itself when p is 0 or gradients are off (evaluation), drawing nothing
 * (PyTorch ties this to eval mode instead: under torch.no_grad() its
 * dropout still drops; qkv_gradcheck's evaluations run without gradients,
 * see gradcheck.h). p in [0, 1), and rng not NULL (even then): QKV_ERR_ARG
 * otherwise. */
qkv_tensor *qkv_dropout(qkv_tape *t, qkv_tensor *x, double p, qkv_rng *rng);

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
 * [...,Tq,Tk] as in qkv_add. A scale that is not finite is refused with
 * QKV_ERR_ARG, as qkv_scale refuses it (so by every attention op here).
 * Returns O: [...,Tq,dv]. If parts is not NULL
 * it receives the scores and the attention weights; they are ordinary tape
 * tensors, so other ops may use them and their gradients flow back, and
 * after qkv_backward their grads hold dL/dscores and dL/dattn.
 *
 * The result and every gradient equal, bit for bit, those of
 * qkv_matmul_nt, qkv_scale, qkv_mask, qkv_softmax and qkv_matmul recorded
 * one after the other (with a scale of 1 standing for no qkv_scale); the
 * fused op keeps each item in cache, records one node instead of five and
 * skips the rows of zeros that picking rows from O leaves in its gradient.
 * One exception: when q, k and v share a gradient (the same tensor passed
 * twice, as in attention(h, h, h)), the vector kernels add the dQ, dK and
 * dV terms into it row by row, so the sum comes out in another order,
 * correct but not bit for bit the unfused ops' (as qkv_embed_attention
 * says of a table passed twice). Another: a row of dO that is all zeros
 * adds nothing to any gradient, and a row of the scores' gradient that is
 * all zeros (after a one-hot row of weights, say) nothing to dQ and dK,
 * where the unfused ops add products of 0: NaN where V, K or Q holds an
 * infinity or a NaN. Every form of attention skips such rows alike, on
 * every kernel set. */
qkv_tensor *qkv_attention(qkv_tape *t, qkv_tensor *q, qkv_tensor *k, qkv_tensor *v,
                          const qkv_tensor *mask, double scale, qkv_attention_parts *parts);

/* qkv_attention without its T×T matrices: FlashAttention's online
 * softmax. Each block of up to 64 query rows meets the keys 256 at a time,
 * keeping a running maximum m and sum l per row and rescaling its output
 * by e^(m_old - m_new) when the maximum grows; backward recomputes each
 * block's weights from the row's m and 1/l, which are all it keeps. The
 * arguments and shapes are qkv_attention's, without parts (there are no
 * scores or weights to give), and with causal: nonzero drops key j from
 * query row i for j > i (PyTorch's is_causal), by index, with no mask
 * tensor. Memory is then O(T·d) where qkv_attention's is O(T²) (a mask
 * tensor, when given, is the caller's), and blocks that causal or the
 * mask drop entirely are skipped.
 *
 * The results differ from qkv_attention's by rounding (the sums run in
 * another order, and the rescalings round): tests/test_attention.c states
 * the bound and checks it. They do not depend on the thread count. NaN
 * inputs may spread differently: a block that is dropped entirely is never
 * read, and a NaN in a row of Q or K reaches dK or dQ of every row of its
 * block, weight 0 or not (0·NaN in the block's product). An infinity in
 * V is no better: a row of dO that is all zeros, which qkv_attention
 * skips, still meets it in its block's products (0·inf), and dQ of every
 * row of the block comes out NaN. A row whose scores are all NaN or -inf
 * gives 0, and one with a NaN among finite scores NaN, as in
 * qkv_softmax. */
qkv_tensor *qkv_attention_online(qkv_tape *t, qkv_tensor *q, qkv_tensor *k, qkv_tensor *v,
                                 const qkv_tensor *mask, double scale, int causal);

/* Multi-head self-attention on a fused projection, with no head copies:
 * x [B,T,3D] holds Q, K and V side by side (columns 0, D and 2D on), each
 * split into heads of d_h = D/heads columns. The same numbers as slicing
 * Q, K and V out of x, reshaping each to [B,T,H,d_h], permuting it to
 * [B,H,T,d_h], qkv_attention(q, k, v, mask, scale, parts) and permuting
 * the result back to [B,T,H,d_h] as [B,T,D], which is what it returns:
 * each head reads its rows from x and writes its output rows into the
 * result directly. The scores and weights are [B,H,T,T]; mask broadcasts
 * to them. */
qkv_tensor *qkv_attention_heads(qkv_tape *t, qkv_tensor *x, int heads, const qkv_tensor *mask,
                                double scale, qkv_attention_parts *parts);

/* qkv_attention_heads in the online form: the same numbers as
 * qkv_attention_online on the heads sliced and permuted to [B,H,T,d_h],
 * and no scores or weights. */
qkv_tensor *qkv_attention_heads_online(qkv_tape *t, qkv_tensor *x, int heads,
                                       const qkv_tensor *mask, double scale, int causal);

/* Attention over embedded tokens, fused with the lookups: the same numbers
 * as qkv_attention(t, gather(wq), gather(wk), gather(wv), mask, scale,
 * parts) with each gather a qkv_gather of ids shaped [B,T], without making
 * Q, K and V as tensors. wq, wk: [V,dk]; wv: [V,dv]; ids: B·T integers,
 * copied onto the tape, each below the row count of every table. Returns
 * [B,T,dv]; the scores and weights are [B,T,T]. Backward adds into the rows
 * of the tables' gradients, in the order the gathers would (for distinct
 * tables: one passed twice gets the same sum in another order). NULL ids,
 * or an id outside the tables: QKV_ERR_ARG. */
qkv_tensor *qkv_embed_attention(qkv_tape *t, qkv_tensor *wq, qkv_tensor *wk, qkv_tensor *wv,
                                const int *ids, int B, int T, const qkv_tensor *mask, double scale,
                                qkv_attention_parts *parts);

/* qkv_embed_attention for a model that reads one output row per item (the
 * coreference model reads the pronoun's): returns [B,dv], row query[b] of
 * item b's output. The same numbers, bit for bit, as
 * qkv_pick_rows(qkv_embed_attention(...), query): the output, the scores
 * and weights of every row in parts, the tables' gradients and, after
 * qkv_backward, the scores' and weights' grads. While T and dv are at
 * most 256 (one depth block of the GEMM), only those rows of A·V are
 * computed (but for AVX-512's fused form of up to 16 keys) and, unless
 * other ops read the scores or weights, backward is O(T·d) per item
 * rather than O(T²·d); past that the full products run and the row is
 * taken from them. No [B,T,dv] output or gradient is made.
 * With parts NULL, nothing can read the other rows of the scores and
 * weights, so under the same bound (and d_k at most 256) they are not
 * made at all: each item costs O(T·(d_k + d_v)), forward and backward,
 * and the [B,T,T] tensors and their gradients are not on the tape. The
 * output and the tables' gradients are still those of the picked rows.
 * Each query[b] must lie in [0,T): QKV_ERR_ARG otherwise, and for a NULL
 * query or NULL ids. */
qkv_tensor *qkv_embed_attention_rows(qkv_tape *t, qkv_tensor *wq, qkv_tensor *wk, qkv_tensor *wv,
                                     const int *ids, int B, int T, const qkv_tensor *mask,
                                     double scale, const int *query, qkv_attention_parts *parts);

#ifdef __cplusplus
}
#endif
#endif
