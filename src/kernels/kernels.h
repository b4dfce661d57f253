/*
 * kernels.h - the hot loops, private to the library: plain arrays in, plain
 * arrays out, with no tapes, tensors or models. Uses only util.
 *
 * Each kernel exists in portable C (always built, always tested) and, in
 * float32 builds on x86-64, in AVX2+FMA and AVX-512 versions. One struct per
 * instruction set (qkv_kernel_set) holds them; dispatch.c picks the set once
 * (runtime.h says how a user chooses), and the entry points below call
 * through it. Sums that decide a probability or a loss accumulate in double.
 */
#ifndef QKV_KERNELS_H
#define QKV_KERNELS_H

#include <stddef.h>

#include "qkv/base.h"

#if (defined(__x86_64__) || defined(__i386__)) && !defined(QKV_DOUBLE) && \
    (defined(__GNUC__) || defined(__clang__))
#define QKV_HAVE_X86_KERNELS 1
#endif

#if defined(__GNUC__) || defined(__clang__)
#define QKV_ALWAYS_INLINE static inline __attribute__((always_inline))
#else
#define QKV_ALWAYS_INLINE static inline
#endif

/* ---- entry points ------------------------------------------------------- */

/* C (m×n) = op(A)·op(B), or C += op(A)·op(B) when accumulate is nonzero.
 * op(A) is m×k: A is stored m×k (ta = 0) or k×m (ta = 1). op(B) is k×n: B is
 * stored k×n (tb = 0) or n×k (tb = 1). All row-major and contiguous. */
void qkv_gemm(int ta, int tb, int m, int n, int k, const qkv_real *A, const qkv_real *B,
              qkv_real *C, int accumulate);

/* Nonzero when qkv_gemm gives an m×n C with depth k the BLOCKS order (its
 * sums by depth blocks, below) rather than a chain or dot products. */
int qkv_gemm_blocked(int m, int n, int k);

/* dst[i,:] = table[ids[i],:] for n rows of d reals (an embedding lookup). */
void qkv_gather_rows(qkv_real *dst, const qkv_real *table, const int *ids, size_t n, size_t d);

/* table[ids[i],:] += src[i,:] for i = 0..n-1 in order (its backward).
 * Rows of src that are all zero are skipped: they add nothing (beyond
 * perhaps turning a -0 into +0). */
void qkv_scatter_add_rows(qkv_real *table, const qkv_real *src, const int *ids, size_t n, size_t d);

/* table[ids[j],:] += coef[j]·x[:] for j = 0..n-1 in order, rows of d
 * reals, each product rounded before its sum (no fused multiply-add, as
 * the generic loop compiles): an outer product coef·x scattered into the
 * rows of a table, as the one-row attention backward adds dV and dK. With
 * skip_zero, a j whose coef is 0 is skipped (its products are ±0, which
 * add nothing to a finite x's rows beyond turning a -0 into +0). */
void qkv_scatter_add_scaled(qkv_real *table, const int *ids, const qkv_real *coef, size_t n,
                            const qkv_real *x, size_t d, int skip_zero);

/* x[0..n) = 0 with plain vector stores: for the short buffers of hot loops,
 * where a libc memset may take a path with a costly start-up. */
void qkv_zero(qkv_real *x, size_t n);

/* Row-wise softmax of x (rows×n) into y. A row that is entirely -inf gives
 * zeros. x and y may alias. */
void qkv_softmax_rows(qkv_real *y, const qkv_real *x, size_t rows, size_t n);

/* e[j] = e^(x[j] - m) for the row maximum m, which goes to *max; returns
 * Σ e[j], accumulated in double. A row of -inf gives zeros and returns 0. */
double qkv_exp_shifted(qkv_real *e, const qkv_real *x, size_t n, double *max);

/* The largest of x[0..n) that is not NaN (-inf when there is none), and
 * whether any of x[0..n) is not ±0 (NaN counts). */
double qkv_row_max(const qkv_real *x, size_t n);
int qkv_any_nonzero(const qkv_real *x, size_t n);

/* Softmax backward, row-wise: dx += y ⊙ (dy - Σ_j dy_j·y_j), with the
 * dot product summed in double over j ascending, and each y_j·(dy_j - dot)
 * taken in double and rounded once before it is added to dx_j. */
void qkv_softmax_backward_rows(qkv_real *dx, const qkv_real *y, const qkv_real *dy, size_t rows,
                               size_t n);

/* Row-wise log-softmax. A row that is entirely -inf gives -inf. */
void qkv_log_softmax_rows(qkv_real *y, const qkv_real *x, size_t rows, size_t n);

/* Σ x², accumulated in double in eight interleaved partial sums (a fixed
 * order, the same on every kernel set). */
double qkv_sum_squares(const qkv_real *x, size_t n);

/* Sum of n values, accumulated in double. */
double qkv_sum_real(const qkv_real *x, size_t n);

/* One Adam step on n weights: with g = grad + l2·w,
 *   m = b1·m + (1-b1)·g,  v = b2·v + (1-b2)·g·g,
 *   w = keep·w - step·m / (sqrt(v)·rs + eps)
 * in double, rounded to qkv_real at the end. Every kernel set gives the
 * same bits (IEEE sqrt and division, the same order, no fused multiply-add).
 * Returns nonzero if a weight it stored or a v is not finite (an m that
 * is not makes a v that is not: g·g overflows first), else 0: a flag kept
 * as it goes, not a second pass. */
typedef struct qkv_adam_coef {
    double b1, b2, step, rs, eps, l2, keep;
} qkv_adam_coef;
int qkv_adam_update(qkv_real *w, const qkv_real *grad, double *m, double *v, size_t n,
                    const qkv_adam_coef *c);

/* Element-wise maths over n values: y[i] = f(x[i]); y may be x. The
 * portable set computes each in double with libm and rounds once; the
 * vector sets stay within the ulp bounds that test_kernels measures. Edges:
 * exp overflows to +inf and underflows to 0; log(0) = -inf, log(x < 0) =
 * NaN; tanh and sigmoid saturate to ±1 and 0/1 exactly; NaN stays NaN. */
void qkv_vexp(qkv_real *y, const qkv_real *x, size_t n);
void qkv_vlog(qkv_real *y, const qkv_real *x, size_t n);
void qkv_vtanh(qkv_real *y, const qkv_real *x, size_t n);
void qkv_vsigmoid(qkv_real *y, const qkv_real *x, size_t n);

/* GELU in the tanh form GPT-2 uses:
 *   gelu(x) = x/2 · (1 + tanh(√(2/π)·(x + 0.044715·x³)))
 * and its backward, dx[i] += dy[i]·gelu'(x[i]), or with store set dx[i] =
 * 0 + dy[i]·gelu'(x[i]), dx unread: the bits of adding into zeros, -0
 * included. Saturates to x and 0 for large |x| (gradients 1 and 0). */
void qkv_vgelu(qkv_real *y, const qkv_real *x, size_t n);
void qkv_vgelu_backward(qkv_real *dx, const qkv_real *x, const qkv_real *dy, size_t n, int store);

/* Layer norm of rows rows of d values: for each row, mean μ and rstd
 * r = 1/√(var + eps) (biased variance; two passes, summed in float in the
 * order norm.c defines, so every kernel set gives the same bits), then
 * y = (x - μ)·r·γ + β, with γ and β of d values (either may be NULL:
 * 1 and 0). mean and rstd (rows values each) keep μ and r for backward.
 * With center = 0 it is RMS norm: μ = 0, var = mean(x²), no β. */
void qkv_norm_rows(qkv_real *y, qkv_real *mean, qkv_real *rstd, const qkv_real *x,
                   const qkv_real *gamma, const qkv_real *beta, size_t rows, size_t d, double eps,
                   int center);

/* Its backward, fused (llm.c's closed form): with x̂ = (x - μ)·r and
 * g = dy·γ, dx += r·(g - mean(g) - x̂·mean(g·x̂)) (without the mean(g) term
 * when center = 0); dgamma += Σ_rows dy·x̂ and dbeta += Σ_rows dy. Any of
 * dx, dgamma and dbeta may be NULL. The means accumulate in float, in
 * norm.c's order. With store set, dx holds nothing yet and is not read:
 * each entry is written as 0 + its term, the bits of adding into zeros
 * (+0 where the term is -0), so no caller has to clear it first. */
void qkv_norm_rows_backward(qkv_real *dx, qkv_real *dgamma, qkv_real *dbeta, const qkv_real *dy,
                            const qkv_real *x, const qkv_real *mean, const qkv_real *rstd,
                            const qkv_real *gamma, size_t rows, size_t d, int center, int store);

/* One batch item of fused attention:
 *   S = scale·Q·Kᵀ (tq×tk),  A = softmax(S + M) row-wise,  O = A·V (tq×dv)
 * for Q tq×dk, K tk×dk, V tk×dv. M is an additive mask (0 keeps, -inf
 * drops) with element (i,j) at mask[i·mask_rs + j·mask_cs], or none when
 * mask is NULL. */
typedef struct qkv_attn_shape {
    int tq, tk, dk, dv;
    const qkv_real *mask;
    size_t mask_rs, mask_cs;
    double scale;
    const int *row_index; /* backward only: a scatter index, see below */
    int sa_zero;          /* backward only: da and ds are known to hold zeros */
    int bq, bk;           /* online form: rows of Q and keys per block */
    int causal;           /* online form: key j > i is dropped from row i too */
    int row_out;          /* embedded form: only row `row` of O is wanted (below) */
    int row;
} qkv_attn_shape;

/* The most keys a kernel set's fused backward takes (avx512_attn.c,
 * avx2_attn.c). */
#define QKV_ATTN_FUSED_KEYS 32

/* Writes S (before the mask), A and O. Every kernel set computes exactly
 * what qkv_gemm, the scaling, the mask and qkv_softmax_rows would, one
 * after the other; the fused form only keeps the item in cache. With
 * sh->row_out, o (still tq·dv reals) gets row sh->row of O, the bits of
 * the full product's row; its other rows are scratch, written or not. */
void qkv_attention_forward(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                           const qkv_real *v, qkv_real *s, qkv_real *a, qkv_real *o);

/* Backward of one item, given A and dO (tq×dv). da (tq×tk) holds any
 * gradient already flowing into A and receives dL/dA in total; ds (tq×tk)
 * likewise for S. dq, dk and dv are accumulated into; any of them may be
 * NULL, and da and ds may both be NULL when neither dq nor dk is wanted.
 * scratch holds tq·tk reals. Rows whose gradient is zero are skipped, which
 * changes no result while Q and K are finite (0·inf would be NaN), and
 * every path skips the same rows; sa_zero spares the kernel looking for
 * gradients already in da and ds when the caller knows there are none.
 *
 * With row_index (tq == tk), dq, dk and dv are scattered into instead: the
 * item's gradient for its row i is added into row row_index[i] of dq, dk
 * and dv, rows in order, exactly as computing the item's gradients from
 * zero and then qkv_scatter_add_rows would; scratch then holds
 * tq·tk + tq·dk + tk·(dk+dv) reals.
 *
 * With row_out as well (the output of one query row, row): dout holds that
 * row alone (dv reals), and the result is what the scatter form gives for
 * a dO that is zero but for that row. scratch then holds
 * qkv_attention_row_scratch reals. */
size_t qkv_attention_row_scratch(int tq, int tk, int dk, int dv);
void qkv_attention_backward(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                            const qkv_real *v, const qkv_real *a, const qkv_real *dout,
                            qkv_real *ds, qkv_real *da, qkv_real *dq, qkv_real *dk, qkv_real *dv,
                            qkv_real *scratch);

/* The row-only form, for a caller that reads neither S nor A: only row
 * sh->row of S, A and O is made, in O(tk·(dk + dv)): row_scores writes
 * S's row (s, tk reals) and the softmax's input, S + M (a, tk reals);
 * qkv_softmax_rows on a then gives A's row, the rows of many items in one
 * call, so that their chains overlap; row_output writes O's row from it
 * (o, dv reals). Backward takes that row of A and dO (go, dv reals) and
 * scatters into dq, dk and dv by sh->row_index, as the row_out form does.
 * Their bits are the full computation's row and gradients (but for the
 * sign of a zero) when qkv_attention_row_only_exact holds for the sizes;
 * callers take the full form otherwise. scratch holds
 * qkv_attention_row_only_scratch reals. */
int qkv_attention_row_only_exact(int tq, int tk, int dk, int dv);
size_t qkv_attention_row_only_scratch(int tk, int dk);
void qkv_attention_row_scores(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                              qkv_real *s, qkv_real *a);
void qkv_attention_row_output(const qkv_attn_shape *sh, const qkv_real *a, const qkv_real *v,
                              qkv_real *o);
void qkv_attention_row_backward(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                                const qkv_real *v, const qkv_real *a, const qkv_real *go,
                                qkv_real *dq, qkv_real *dk, qkv_real *dv, qkv_real *scratch);

/* The online form (attention_online.c): the same attention without S
 * and A, in blocks of sh->bq rows of Q (at most QKV_ONLINE_BQ) and sh->bk
 * keys, FlashAttention's running maximum and sum across the key blocks;
 * with sh->causal, row i sees keys j <= i only (blocks above that never
 * read). A block that the mask drops entirely is not read either, so a
 * NaN in its Q or K rows does not reach the result, as it does in the
 * unfused ops; and a NaN in a row of Q or K spreads through the dK or dQ
 * of its whole block.
 * Forward writes O and, when ml is not NULL, 2·tq reals: each row's
 * largest logit m (-inf for a row with every key masked), then each row's
 * 1/l = 1/Σ_j e^(x_j - m) (1 for such a row). Backward adds into dq, dk
 * and dv (any may be NULL), given O, ml and dO; it skips each block of
 * rows whose dO is zero. scratch holds 2·bq·bk + bq·dv reals (forward:
 * bq·bk). */
#define QKV_ONLINE_BQ 64
#define QKV_ONLINE_BK 256
void qkv_attention_online_forward(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                                  const qkv_real *v, qkv_real *o, qkv_real *ml, qkv_real *scratch);
void qkv_attention_online_backward(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                                   const qkv_real *v, const qkv_real *o, const qkv_real *ml,
                                   const qkv_real *dout, qkv_real *dq, qkv_real *dk, qkv_real *dv,
                                   qkv_real *scratch);
/* The block sizes an op made now takes for its tq×tk items, and the
 * tests' way to make them small (bq is held to 1..QKV_ONLINE_BQ, bk to 1
 * and up; not for use while ops run on other threads). */
void qkv_attention_online_block_sizes(int tq, int tk, int *bq, int *bk);
void qkv_attention_online_blocks(int bq, int bk);

/* ---- kernel sets -------------------------------------------------------- */

/* C (mr×nr corner of an ldc-wide matrix) += Ap (kc×MR panel) · Bp (kc×NR). */
typedef void (*qkv_ukernel_fn)(int kc, const qkv_real *ap, const qkv_real *bp, qkv_real *c, int ldc,
                               int mr, int nr);

/* C (m×n) += op(A)·op(B) by the direct path, in the chain order, or the
 * dots order for a Bᵀ too deep to copy (qkv_gemm_takes_dots); with store,
 * C = op(A)·op(B), each chain from a zero of its own, C unread: the bits
 * of C += on a zeroed C. */
typedef void (*qkv_direct_fn)(int ta, int tb, int m, int n, int k, const qkv_real *A,
                              const qkv_real *B, qkv_real *C, int store);

/* The order in which qkv_gemm adds up each element of C, fixed by the
 * shape alone (gemm.c), so that every path of a kernel set gives the same
 * bits. With "multiply-add" the set's own (an FMA in the vector sets; a
 * rounded product, then a rounded sum, in portable):
 *   CHAIN   c = C; c = multiply-add(A(i,p), B(p,j), c) for p = 0..k-1
 *   BLOCKS  for each depth block [QKV_GEMM_KC·b, QKV_GEMM_KC·(b+1)): t = 0,
 *           the same chain over the block, then C += t
 *   DOTS    s_l = 0; s_l = multiply-add(A(i,p), B(p,j), s_l) for p = l mod 4
 *           in ascending p, the last k mod 4 into s_0; C += (s0 + s1) + (s2 + s3)
 */
typedef enum qkv_gemm_order { QKV_GEMM_CHAIN, QKV_GEMM_BLOCKS, QKV_GEMM_DOTS } qkv_gemm_order;
#define QKV_GEMM_KC 256 /* the depth of a BLOCKS block */
#define QKV_GEMM_NC 512 /* columns of op(B) packed at once */
#define QKV_DOTS_MB 48  /* the vector sets' dots order: rows of C per block */
#define QKV_DOTS_KC 128 /* and depth per block (a multiple of 4) */

/* One product, C (m×n) += op(A)·op(B) in the given order (as qkv_gemm). */
typedef struct qkv_gemm_args {
    qkv_gemm_order order;
    int ta, tb, m, n, k;
    const qkv_real *A, *B;
    qkv_real *C;
    int store; /* blocks or chain order: C = op(A)·op(B), C's
                * contents unread (kernel sets with gemm_stores); otherwise
                * C += op(A)·op(B) */
} qkv_gemm_args;
typedef void (*qkv_gemm_fn)(const qkv_gemm_args *g);

/* y[j] = e^(x[j] - mx) for x[j] <= mx; returns Σ y[j] in double. */
typedef double (*qkv_exps_fn)(size_t n, const qkv_real *x, qkv_real mx, qkv_real *y);

/* Softmax of one row of at most 16 entries. */
typedef void (*qkv_softmax16_fn)(size_t n, const qkv_real *x, qkv_real *y);

/* Fused attention for one item; return nonzero when the shape is not one
 * they handle, and the generic path runs instead. */
typedef int (*qkv_attn_fwd_fn)(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                               const qkv_real *v, qkv_real *s, qkv_real *a, qkv_real *o);
typedef int (*qkv_attn_bwd_fn)(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                               const qkv_real *v, const qkv_real *a, const qkv_real *dout,
                               qkv_real *ds, qkv_real *da, qkv_real *dq, qkv_real *dk, qkv_real *dv,
                               qkv_real *scratch);

/* Adam on n weights; nonzero if one it stored, or a v, is not finite. */
typedef int (*qkv_adam_fn)(qkv_real *w, const qkv_real *grad, double *m, double *v, size_t n,
                           const qkv_adam_coef *c);

/* x[0..n) = 0. */
typedef void (*qkv_zero_fn)(qkv_real *x, size_t n);

/* y[i] = f(x[i]), and GELU's backward (store as qkv_vgelu_backward's). */
typedef void (*qkv_map_fn)(qkv_real *y, const qkv_real *x, size_t n);
typedef void (*qkv_map_bwd_fn)(qkv_real *dx, const qkv_real *x, const qkv_real *dy, size_t n,
                               int store);

/* Gather or scatter-add n rows of d reals by ids. */
typedef void (*qkv_rows_fn)(qkv_real *x, const qkv_real *y, const int *ids, size_t n, size_t d);

/* qkv_scatter_add_scaled, with exactly the bits of its generic loop. */
typedef void (*qkv_scatter_scaled_fn)(qkv_real *table, const int *ids, const qkv_real *coef,
                                      size_t n, const qkv_real *x, size_t d, int skip_zero);

/* Softmax of rows rows of n entries (y may be x), giving exactly the bits
 * of the generic path: the row maximum, the set's exps, one float multiply
 * by (float)(1/sum); zeros for a row with no maximum above -inf. */
typedef void (*qkv_softmax_rows_fn)(qkv_real *y, const qkv_real *x, size_t rows, size_t n);

/* qkv_softmax_backward_rows, with exactly the bits of its generic loop. */
typedef void (*qkv_softmax_bwd_fn)(qkv_real *dx, const qkv_real *y, const qkv_real *dy, size_t rows,
                                   size_t n);

/* One row of attention's scores after Q·Kᵀ: s[j] = c·s[j] (in double,
 * rounded once, as the scaling op rounds), then a[j] = s[j] + m[j], or
 * s[j] when m is NULL (the additive mask op's float sum). */
typedef void (*qkv_scale_mask_fn)(qkv_real *s, qkv_real *a, const qkv_real *m, size_t n, double c);

/* Scaling, key mask (row i's at m + i·m_rs; m may be NULL) and then
 * qkv_softmax_rows of s + m into a, for rows of n entries, with every bit
 * as those three steps give it; nonzero (and nothing done) for an n the
 * set does not take. s (scaled in place) and a must not overlap: a set
 * may store the scaled scores last. */
typedef int (*qkv_attn_rows_fn)(qkv_real *s, qkv_real *a, const qkv_real *m, size_t m_rs,
                                size_t rows, size_t n, double c);

/* Its backward for one row: ds[j] += g[j], or += 0 where m[j] is -inf
 * (m may be NULL), then g[j] = c·ds[j] rounded as above. */
typedef void (*qkv_mask_scale_bwd_fn)(qkv_real *ds, qkv_real *g, const qkv_real *m, size_t n,
                                      double c);

/* qkv_norm_rows and qkv_norm_rows_backward, in the order norm.c defines. */
typedef void (*qkv_norm_fn)(qkv_real *y, qkv_real *mean, qkv_real *rstd, const qkv_real *x,
                            const qkv_real *gamma, const qkv_real *beta, size_t rows, size_t d,
                            double eps, int center);
typedef void (*qkv_norm_bwd_fn)(qkv_real *dx, qkv_real *dgamma, qkv_real *dbeta, const qkv_real *dy,
                                const qkv_real *x, const qkv_real *mean, const qkv_real *rstd,
                                const qkv_real *gamma, size_t rows, size_t d, int center,
                                int store);

/* One instruction set's kernels. Optional fields are NULL where the set
 * has no version of its own and the generic path runs. */
typedef struct qkv_kernel_set {
    const char *name;
    int mr, nr;                 /* the micro-kernel's tile */
    qkv_ukernel_fn ukernel;     /* the blocked GEMM's micro-kernel */
    qkv_direct_fn direct;       /* the direct path for small and thin products */
    qkv_gemm_fn gemm;           /* optional: every product, in every order (then the four
                                 * fields above are unused and may be 0 and NULL) */
    int gemm_pack_b_min;        /* gemm, B stored k×n: packed from this many rows of C on */
    int gemm_stores;            /* gemm takes store: the first depth block's tiles write
                                 * 0 + their sum instead of adding into (or, in the chain
                                 * order, starting from) a zeroed C */
    qkv_exps_fn exps;           /* softmax's exponentials */
    qkv_softmax16_fn softmax16; /* optional: short rows in one register */
    qkv_attn_fwd_fn attn_fwd;   /* optional: fused attention */
    qkv_attn_bwd_fn attn_bwd;
    qkv_rows_fn gather; /* embedding rows */
    qkv_rows_fn scatter_add;
    qkv_scatter_scaled_fn scatter_add_scaled; /* optional: rows of an outer product */
    qkv_adam_fn adam;
    qkv_zero_fn zero;
    qkv_map_fn exp, log, tanh, sigmoid, gelu; /* element-wise maths */
    qkv_map_bwd_fn gelu_backward;
    qkv_softmax_rows_fn softmax_rows;     /* optional: rows longer than softmax16's */
    qkv_softmax_bwd_fn softmax_bwd;       /* optional: softmax's backward */
    qkv_scale_mask_fn scale_mask;         /* optional: attention's scaling and key mask */
    qkv_mask_scale_bwd_fn mask_scale_bwd; /* optional: their backward */
    qkv_attn_rows_fn attn_rows;           /* optional: scaling, mask and softmax of short rows */
    qkv_norm_fn norm;                     /* layer norm and RMS norm */
    qkv_norm_bwd_fn norm_backward;
} qkv_kernel_set;

/* The sets this build has (portable always; the others on x86-64 float32
 * builds), and the one in use: chosen once, race-free (dispatch.c). */
extern const qkv_kernel_set qkv_kernels_portable;
#ifdef QKV_HAVE_X86_KERNELS
extern const qkv_kernel_set qkv_kernels_avx2;
extern const qkv_kernel_set qkv_kernels_avx512;
void qkv_gemm_avx2(const qkv_gemm_args *g); /* the AVX2 set's gemm (avx2_gemm.c) */
#endif
const qkv_kernel_set *qkv_kernels(void);

/* ---- shared between the sets ------------------------------------------- */

/* The portable kernels that the other sets reuse (portable.c). */
void qkv_portable_gather(qkv_real *dst, const qkv_real *table, const int *ids, size_t n, size_t d);
void qkv_portable_scatter_add(qkv_real *table, const qkv_real *src, const int *ids, size_t n,
                              size_t d);
int qkv_portable_adam(qkv_real *w, const qkv_real *grad, double *m, double *v, size_t n,
                      const qkv_adam_coef *c);
void qkv_portable_zero(qkv_real *x, size_t n);
void qkv_portable_exp(qkv_real *y, const qkv_real *x, size_t n);
void qkv_portable_log(qkv_real *y, const qkv_real *x, size_t n);
void qkv_portable_tanh(qkv_real *y, const qkv_real *x, size_t n);
void qkv_portable_sigmoid(qkv_real *y, const qkv_real *x, size_t n);
void qkv_portable_gelu(qkv_real *y, const qkv_real *x, size_t n);
void qkv_portable_gelu_backward(qkv_real *dx, const qkv_real *x, const qkv_real *dy, size_t n,
                                int store);
void qkv_portable_norm(qkv_real *y, qkv_real *mean, qkv_real *rstd, const qkv_real *x,
                       const qkv_real *gamma, const qkv_real *beta, size_t rows, size_t d,
                       double eps, int center);
void qkv_portable_norm_backward(qkv_real *dx, qkv_real *dgamma, qkv_real *dbeta, const qkv_real *dy,
                                const qkv_real *x, const qkv_real *mean, const qkv_real *rstd,
                                const qkv_real *gamma, size_t rows, size_t d, int center,
                                int store);

#ifdef QKV_HAVE_X86_KERNELS
/* The vector sets' norms (avx2_norm.c, avx512_norm.c). */
void qkv_norm_avx2(float *y, float *mean, float *rstd, const float *x, const float *gamma,
                   const float *beta, size_t rows, size_t d, double eps, int center);
void qkv_norm_backward_avx2(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                            const float *mean, const float *rstd, const float *gamma, size_t rows,
                            size_t d, int center, int store);
void qkv_norm_avx512(float *y, float *mean, float *rstd, const float *x, const float *gamma,
                     const float *beta, size_t rows, size_t d, double eps, int center);
void qkv_norm_backward_avx512(float *dx, float *dgamma, float *dbeta, const float *dy,
                              const float *x, const float *mean, const float *rstd,
                              const float *gamma, size_t rows, size_t d, int center, int store);
#endif

/* The direct paths' helpers (gemm.c): a per-thread scratch for a copied
 * Bᵀ (the portable set copies op(B) into it QKV_DIRECT_NR columns at a
 * time; the vector sets pack their dots order's blocks of op(B) into it),
 * those columns of Bᵀ as a row-major k×w matrix, and C += op(A)·Bᵀ as dot
 * products for a B too deep to copy (with store, C is zeroed first:
 * C = op(A)·Bᵀ, each sum added to +0). */
#define QKV_DIRECT_SCRATCH 65536
#define QKV_DIRECT_NR 64 /* columns of C per pass of the portable direct path */
_Static_assert(QKV_DOTS_KC % 4 == 0 && QKV_DOTS_KC * 32 <= QKV_DIRECT_SCRATCH,
               "a dots block of depth is whole fours, and 32 packed columns of it fit");
extern _Thread_local qkv_real qkv_direct_scratch[QKV_DIRECT_SCRATCH];
/* Nonzero when qkv_gemm gives a product with B stored n×k (tb), n columns
 * and depth k the DOTS order: a strip of QKV_DIRECT_NR columns of Bᵀ (all
 * n of them, if fewer) does not fit the scratch (the blocked path aside).
 * Every Bᵀ that fits whole keeps the chain order it had when the portable
 * path copied it whole. */
int qkv_gemm_takes_dots(int n, int k);
void qkv_gemm_bt_cols(int k, int j0, int w, const qkv_real *B, qkv_real *dst);
void qkv_gemm_dots(int ta, int m, int n, int k, const qkv_real *A, const qkv_real *B, qkv_real *C,
                   int store);

/* The packed op(B) of the blocked paths: QKV_GEMM_KC × QKV_GEMM_NC reals
 * per thread (gemm.c). */
extern _Thread_local qkv_real qkv_gemm_pack_b[QKV_GEMM_KC * QKV_GEMM_NC];

/* Adds the mr×nr corner of an MR×NR tile t (row stride NR) to C: the
 * portable micro-kernel's ragged edge. */
void qkv_gemm_add_tile(const qkv_real *t, int NR, qkv_real *c, int ldc, int mr, int nr);

/* The grad_rows form of attention backward on any path: the item's
 * gradients computed into scratch (zeroed first), then added into the
 * indexed rows in order (attention.c). */
void qkv_attention_backward_scatter(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                                    const qkv_real *v, const qkv_real *a, const qkv_real *dout,
                                    qkv_real *ds, qkv_real *da, qkv_real *dq, qkv_real *dk,
                                    qkv_real *dv, qkv_real *scratch);

/* e^x for x <= 0 in float, vectorised: x = t·ln2 + r with |r| <= ln2/2
 * (ln2 split in two so t·ln2 is exact), e^r by its Taylor series to r^7
 * (truncation below 6e-9 relative), then scaled by 2^t. Results below
 * e^-87 (under FLT_MIN) are returned as 0, so masked scores (-inf) give
 * exactly 0. Within 2 ulp of the exact value. The constants: */
#define QKV_EXP_LN2_HI 0.693145751953125f
#define QKV_EXP_LN2_LO 1.428606765330187e-06f
#define QKV_EXP_LOG2E 1.44269504088896341f
#define QKV_EXP_MIN (-87.0f)

#endif
