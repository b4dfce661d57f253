/*
 * test_attention.c - the fused attention ops (attention.c and the kernels
 * they run) against the unfused ops they stand for, exactly, on every
 * kernel set and thread count; and their error messages. (Finite
 * differences for them are in test_gradcheck.c.)
 */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "tests.h"

/* ---- fused attention against the five ops it stands for ---------------- */
/* On every kernel set: each computes both forms with its own kernels, and
 * the two must agree exactly. */

typedef struct attn_case {
    int nd, shape_q[4], tk, dv;
    int mask;     /* 0 none, 1 padding [...,1,Tk], 2 causal [...,Tq,Tk] with one empty row,
                   * 3 one value per query row [...,Tq,1], rows 2, 5, 8, ... dropped */
    int pick;     /* 1: the loss uses one row of O per item (zero rows in dO) */
    int parts;    /* 1: the loss also uses the scores and the weights */
    double scale; /* 1: the unfused form has no qkv_scale */
} attn_case;

static qkv_tensor *random_tensor(qkv_rng *g, int nd, const int *shape, int grad)
{
    qkv_tensor *x = qkv_tensor_new(nd, shape, grad, NULL);
    for (size_t i = 0; i < x->numel; i++)
        x->data[i] = (qkv_real)qkv_rng_normalvariate(g, 0, 1);
    return x;
}

/* Σ x ⊙ w for a fixed random w shaped like x. */
static qkv_tensor *weighted_sum(qkv_tape *t, qkv_tensor *x, qkv_rng *g)
{
    qkv_tensor *w = qkv_tape_tensor(t, x->ndim, x->shape, 0);
    for (size_t i = 0; !qkv_tensor_is_nil(w) && i < w->numel; i++)
        w->data[i] = (qkv_real)qkv_rng_normalvariate(g, 0, 1);
    return qkv_sum(t, qkv_mul(t, x, w));
}

/* Records the loss on t, fused or unfused, and runs backward; *s and *a
 * receive the scores and weights. */
static qkv_tensor *attn_loss(qkv_tape *t, const attn_case *c, int fused, qkv_tensor *q,
                             qkv_tensor *k, qkv_tensor *v, const qkv_tensor *mask, qkv_tensor **s,
                             qkv_tensor **a)
{
    qkv_rng g;
    qkv_rng_seed(&g, 99); /* the same loss weights for both forms */
    qkv_tensor *o;
    if (fused) {
        qkv_attention_parts p;
        o = qkv_attention(t, q, k, v, mask, c->scale, &p);
        *s = p.scores;
        *a = p.attn;
    } else {
        *s = qkv_matmul_nt(t, q, k);
        if (c->scale != 1)
            *s = qkv_scale(t, *s, c->scale);
        *a = qkv_softmax(t, mask != NULL ? qkv_mask(t, *s, mask) : *s);
        o = qkv_matmul(t, *a, v);
    }
    int rows[8];
    for (int b = 0; b < 8; b++)
        rows[b] = (3 * b + 1) % c->shape_q[c->nd - 2];
    qkv_tensor *loss = weighted_sum(t, c->pick ? qkv_pick_rows(t, o, rows) : o, &g);
    if (c->parts)
        loss = qkv_add(t, qkv_add(t, loss, weighted_sum(t, *s, &g)), weighted_sum(t, *a, &g));
    /* Q read again, recorded last: its gradient is filled before the
     * attention's backward adds into it */
    loss = qkv_add(t, loss, weighted_sum(t, q, &g));
    ck_assert_msg(qkv_backward(t, loss) == QKV_OK, "%s", qkv_tape_error(t));
    return o;
}

/* x and y hold equal values (== so that -0 equals +0). One check per
 * array, not per value: Check writes down where each assertion is. */
static void assert_same(const qkv_real *x, const qkv_real *y, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (!(x[i] == y[i] || (isnan(x[i]) && isnan(y[i]))))
            ck_abort_msg("%s[%zu]: fused %.9g, unfused %.9g", what, i, (double)x[i], (double)y[i]);
}

static void check_attention_case(const attn_case *c)
{
    qkv_rng g;
    qkv_rng_seed(&g, 5);
    const int nd = c->nd, tq = c->shape_q[nd - 2];
    int sk[4], sv[4], sm[4];
    memcpy(sk, c->shape_q, sizeof sk);
    sk[nd - 2] = c->tk;
    memcpy(sv, sk, sizeof sv);
    sv[nd - 1] = c->dv;
    memcpy(sm, sk, sizeof sm);
    sm[nd - 1] = c->mask == 3 ? 1 : c->tk;
    sm[nd - 2] = c->mask == 1 ? 1 : tq;
    qkv_tensor *x[3] = {random_tensor(&g, nd, c->shape_q, 1), random_tensor(&g, nd, sk, 1),
                        random_tensor(&g, nd, sv, 1)};
    qkv_tensor *mask = c->mask ? qkv_tensor_new(nd, sm, 0, NULL) : NULL;
    for (size_t e = 0; mask != NULL && e < mask->numel; e++) {
        const size_t w = (size_t)sm[nd - 1];
        int j = (int)(e % w), i = (int)(e / w % (size_t)sm[nd - 2]);
        int item = (int)(e / (w * sm[nd - 2]));
        /* mask 2: causal, and item 1's rows 0, 2, 7 and 17 all dropped (rows
         * at each place in a group of four, and in the tail past them) */
        int drop = c->mask == 1   ? j >= c->tk - item % 3
                   : c->mask == 3 ? i % 3 == 2
                                  : j > i || (item == 1 && (i == 0 || i == 2 || i == 7 || i == 17));
        mask->data[e] = drop ? -INFINITY : 0;
    }
    qkv_tape *tp[2] = {qkv_tape_new(0, NULL), qkv_tape_new(0, NULL)};
    qkv_tensor *o[2], *s[2], *a[2];
    qkv_real *grads[2][3];
    for (int f = 0; f < 2; f++) {
        for (int i = 0; i < 3; i++)
            qkv_tensor_zero_grad(x[i]);
        o[f] = attn_loss(tp[f], c, f, x[0], x[1], x[2], mask, &s[f], &a[f]);
        for (int i = 0; i < 3; i++) {
            grads[f][i] = malloc(sizeof(qkv_real) * x[i]->numel);
            memcpy(grads[f][i], x[i]->grad, sizeof(qkv_real) * x[i]->numel);
        }
    }
    assert_same(o[1]->data, o[0]->data, o[0]->numel, "O");
    assert_same(s[1]->data, s[0]->data, s[0]->numel, "scores");
    assert_same(a[1]->data, a[0]->data, a[0]->numel, "attn");
    assert_same(s[1]->grad, s[0]->grad, s[0]->numel, "dscores");
    assert_same(a[1]->grad, a[0]->grad, a[0]->numel, "dattn");
    const char *names[3] = {"dQ", "dK", "dV"};
    for (int i = 0; i < 3; i++) {
        assert_same(grads[1][i], grads[0][i], x[i]->numel, names[i]);
        double norm = 0; /* and not trivially: every input gets a gradient */
        for (size_t e = 0; e < x[i]->numel; e++)
            norm += fabs((double)grads[1][i][e]);
        ck_assert_msg(norm > 0, "%s is all zeros", names[i]);
        free(grads[0][i]);
        free(grads[1][i]);
        qkv_tensor_free(x[i]);
    }
    qkv_tensor_free(mask);
    qkv_tape_free(tp[0]);
    qkv_tape_free(tp[1]);
}

START_TEST(test_attention_equals_unfused_ops)
{
    static const attn_case cases[] = {
        /* the coreference model's shape: padding, one row per item */
        {3, {4, 12, 16}, 12, 16, 1, 1, 0, 0.25},
        /* wide heads: transposes in several blocks, ragged columns */
        {3, {2, 5, 40}, 7, 70, 2, 0, 1, 0.158113883008419},
        /* more keys than one register holds: the generic path */
        {3, {2, 20, 8}, 20, 8, 1, 1, 1, 1},
        /* 16 keys exactly, no mask, 2-D */
        {2, {6, 16}, 16, 9, 0, 0, 1, 0.25},
        /* 4-D heads with a padding mask */
        {4, {2, 2, 3, 8}, 4, 5, 1, 0, 1, 0.5},
        /* the generic path's scaling by a c that no float holds (rounded
         * from double), masked and not, whole vectors and a tail */
        {3, {2, 19, 8}, 21, 8, 1, 0, 1, 0.3},
        {2, {20, 8}, 24, 6, 0, 0, 1, 0.17},
        {3, {2, 18, 8}, 18, 8, 2, 0, 1, 0.3},
        {3, {2, 26, 8}, 29, 8, 1, 1, 1, 0.3},  /* four AVX2 chunks */
        {3, {2, 19, 8}, 21, 8, 1, 1, 1, 0.75}, /* a float c, not a power of 2 */
        /* tq and d_k of 48 or more: dQ += dS·K takes the blocks order */
        {3, {1, 64, 64}, 16, 8, 0, 0, 1, 0.25},
        /* tq and d_v of 48 or more: O = A·V takes the blocks order */
        {3, {1, 50, 12}, 20, 56, 1, 0, 1, 0.3},
        /* rows of 3 to 8 chunks (AVX-512: 8/C rows in registers at once,
         * a row left over), ragged or whole, padding or causal masks with
         * rows dropped entirely, the scale in float or not */
        {3, {2, 9, 8}, 64, 8, 1, 0, 1, 0.3},
        {3, {2, 7, 8}, 100, 8, 2, 0, 1, 0.25},
        {3, {1, 5, 8}, 128, 8, 0, 1, 1, 0.125},
        {3, {2, 6, 8}, 40, 8, 1, 1, 1, 0.3},
        /* rows of more than 8 chunks, one pass of the max and two of e^x */
        {3, {2, 5, 8}, 200, 8, 1, 0, 1, 0.3},
        {3, {2, 20, 8}, 256, 8, 2, 0, 1, 0.125},
        /* a mask per query row, read along the keys with stride 0: in the
         * register kernels' backward too (AVX2's one key register, and
         * two), and on the generic path */
        {3, {2, 12, 8}, 7, 5, 3, 0, 1, 0.3},
        {3, {2, 20, 8}, 16, 8, 3, 0, 1, 0.25},
        {3, {2, 18, 8}, 30, 8, 3, 1, 1, 0.3},
    };
    static const char *impls[] = {"portable", "avx2", "avx512"};
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(impls[im], NULL) != 0)
            continue;
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            check_attention_case(&cases[i]);
    }
    qkv_kernels_use("auto", NULL);
}
END_TEST

/* qkv_embed_attention against three qkv_gather and qkv_attention: the same
 * outputs and table gradients exactly, ids repeating (so rows accumulate),
 * a padding mask with a hole, a loss on picked rows or on all of O, with
 * or without one on the scores and weights; on the register paths (T <=
 * 16; T <= 32 for the one-row backward) and the rows path (T = 20). */
static void check_embed_form(int B, int T, int V, int dk, int dv, int pick, int parts_loss,
                             int rows_form)
{
    qkv_rng g;
    qkv_rng_seed(&g, 8);
    qkv_tensor *w[3] = {random_tensor(&g, 2, (const int[]){V, dk}, 1),
                        random_tensor(&g, 2, (const int[]){V, dk}, 1),
                        random_tensor(&g, 2, (const int[]){V, dv}, 1)};
    int *ids = malloc(sizeof *ids * (size_t)B * T), *rows = malloc(sizeof *rows * (size_t)B);
    for (int i = 0; i < B * T; i++)
        ids[i] = (int)qkv_rng_below(&g, (uint64_t)V);
    for (int b = 0; b < B; b++)
        rows[b] = (2 * b + 1) % T;
    qkv_tensor *mask = qkv_tensor_new(3, (const int[]){B, 1, T}, 0, NULL);
    for (int e = 0; e < B * T; e++) /* padding, and item 1 drops key 1 too */
        mask->data[e] = e % T >= T - (e / T) % 3 || e == T + 1 ? -INFINITY : 0;
    qkv_tape *tp[2] = {qkv_tape_new(0, NULL), qkv_tape_new(0, NULL)};
    qkv_tensor *o[2];
    qkv_attention_parts parts[2];
    qkv_real *grads[2][3];
    for (int f = 0; f < 2; f++) {
        qkv_tape *t = tp[f];
        for (int i = 0; i < 3; i++)
            qkv_tensor_zero_grad(w[i]);
        if (rows_form) { /* rows picked from the embedded form, or the rows form */
            o[f] = f == 0
                       ? qkv_embed_attention(t, w[0], w[1], w[2], ids, B, T, mask, 0.3, &parts[f])
                       : qkv_embed_attention_rows(t, w[0], w[1], w[2], ids, B, T, mask, 0.3, rows,
                                                  rows_form == 2 ? NULL : &parts[f]);
        } else if (f == 0) {
            const int shape[2] = {B, T};
            o[f] = qkv_attention(t, qkv_gather(t, w[0], ids, 2, shape),
                                 qkv_gather(t, w[1], ids, 2, shape),
                                 qkv_gather(t, w[2], ids, 2, shape), mask, 0.3, &parts[f]);
        } else {
            o[f] = qkv_embed_attention(t, w[0], w[1], w[2], ids, B, T, mask, 0.3, &parts[f]);
        }
        qkv_rng lw;
        qkv_rng_seed(&lw, 4);
        const int pick_here = pick && !(rows_form && f == 1); /* the rows form picks itself */
        qkv_tensor *loss = weighted_sum(t, pick_here ? qkv_pick_rows(t, o[f], rows) : o[f], &lw);
        if (parts_loss)
            loss = qkv_add(t, loss,
                           qkv_add(t, weighted_sum(t, parts[f].scores, &lw),
                                   weighted_sum(t, parts[f].attn, &lw)));
        ck_assert_msg(qkv_backward(t, loss) == QKV_OK, "%s", qkv_tape_error(t));
        for (int i = 0; i < 3; i++) {
            grads[f][i] = malloc(sizeof(qkv_real) * w[i]->numel);
            memcpy(grads[f][i], w[i]->grad, sizeof(qkv_real) * w[i]->numel);
        }
    }
    if (rows_form) { /* [B,dv]: row rows[b] of item b */
        ck_assert_int_eq(o[1]->ndim, 2);
        ck_assert_int_eq(o[1]->shape[1], dv);
        for (int b = 0; b < B; b++)
            assert_same(o[1]->data + (size_t)b * dv, o[0]->data + ((size_t)b * T + rows[b]) * dv,
                        (size_t)dv, "O rows");
    } else {
        assert_same(o[1]->data, o[0]->data, o[0]->numel, "O");
    }
    if (rows_form != 2) { /* 2: the rows form made no parts */
        assert_same(parts[1].scores->data, parts[0].scores->data, parts[0].scores->numel, "scores");
        assert_same(parts[1].attn->data, parts[0].attn->data, parts[0].attn->numel, "attn");
        assert_same(parts[1].scores->grad, parts[0].scores->grad, parts[0].scores->numel,
                    "dscores");
        assert_same(parts[1].attn->grad, parts[0].attn->grad, parts[0].attn->numel, "dattn");
    }
    const char *names[3] = {"dWq", "dWk", "dWv"};
    for (int i = 0; i < 3; i++) {
        assert_same(grads[1][i], grads[0][i], w[i]->numel, names[i]);
        free(grads[0][i]);
        free(grads[1][i]);
        qkv_tensor_free(w[i]);
    }
    free(ids);
    free(rows);
    qkv_tensor_free(mask);
    qkv_tape_free(tp[0]);
    qkv_tape_free(tp[1]);
}

static void check_embed_case(int B, int T, int V, int dk, int dv, int pick, int parts_loss)
{
    check_embed_form(B, T, V, dk, dv, pick, parts_loss, 0);
}

START_TEST(test_embed_attention_equals_gathers_and_attention)
{
    static const char *impls[] = {"portable", "avx2", "avx512"};
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(impls[im], NULL) != 0)
            continue;
        /* one live row per item, nothing else into A or S: the register
         * path adds each row's gradient straight into the tables */
        check_embed_case(4, 12, 7, 16, 16, 1, 0);
        check_embed_case(3, 9, 6, 40, 20, 1, 0);
        /* rows too many to keep for backward (768 KiB): gathered again */
        check_embed_case(64, 16, 9, 64, 64, 1, 0);
        /* more live rows, or gradients into A and S: item buffers first */
        check_embed_case(4, 12, 7, 16, 16, 0, 0);
        check_embed_case(4, 12, 7, 16, 16, 1, 1);
        check_embed_case(2, 20, 5, 8, 5, 1, 1);
        /* past the register path (T > 16), one live row: the generic
         * path's O(T·d) backward (attention.c), also with d_v past the
         * direct path's scratch, where dA = dO·Vᵀ takes dot products */
        check_embed_case(3, 20, 6, 16, 16, 1, 0);
        check_embed_case(2, 21, 5, 8, 5, 1, 0);
        check_embed_case(2, 19, 7, 24, 3500, 1, 0);
        check_embed_case(2, 32, 6, 16, 300, 1, 0); /* 32 keys, dv past 256 */
        /* T >= 48, where qkv_gemm blocks the full products by depth: the
         * one-row path while a depth fits one block, else the full one */
        check_embed_case(2, 50, 7, 16, 16, 1, 0);
        check_embed_case(2, 50, 7, 64, 48, 1, 0);
        check_embed_case(2, 48, 5, 8, 300, 1, 0);
        /* and with Vᵀ (256 × 257) past the direct paths' scratch, which
         * does not change the one-row product's chain */
        check_embed_case(1, 257, 7, 8, 256, 1, 0);
    }
    qkv_kernels_use("auto", NULL);
}
END_TEST

/* qkv_embed_attention_rows against qkv_pick_rows of qkv_embed_attention:
 * the same output rows, scores, weights, their gradients and the tables'
 * gradients exactly, with a loss on the rows alone or on the scores and
 * weights too (check_embed_case's other form). */
static void check_rows_case(int B, int T, int V, int dk, int dv, int parts_loss)
{
    check_embed_form(B, T, V, dk, dv, 1, parts_loss, 1);
}

START_TEST(test_embed_attention_rows_equals_picked_rows)
{
    static const char *impls[] = {"portable", "avx2", "avx512"};
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(impls[im], NULL) != 0)
            continue;
        for (int threads = 1; threads <= 2; threads++) { /* each part its own O buffer */
            ck_assert_int_eq(qkv_threads_use(threads, NULL), 0);
            /* the register paths: forward to 16 keys, backward to 32 */
            check_rows_case(4, 12, 7, 16, 16, 0);
            check_rows_case(3, 21, 6, 16, 16, 0);
            /* past them: the one-row products, forward and backward */
            check_rows_case(3, 33, 6, 16, 16, 0);
        }
        qkv_threads_use(1, NULL);
        check_rows_case(2, 32, 6, 16, 300, 0); /* dv past a depth block */
        check_rows_case(2, 50, 7, 64, 48, 0);
        check_rows_case(2, 40, 5, 8, 3500, 0); /* dA = dO·Vᵀ as dot products */
        check_rows_case(2, 256, 9, 8, 8, 0);   /* a depth of one whole block */
        /* a depth past one block (BLOCKS order): the full products */
        check_rows_case(2, 260, 9, 48, 48, 0);
        check_rows_case(2, 60, 9, 16, 300, 0);
        /* gradients into S and A from elsewhere: the full products */
        check_rows_case(3, 12, 7, 16, 16, 1);
        check_rows_case(3, 40, 7, 16, 16, 1);
    }
    qkv_kernels_use("auto", NULL);
}
END_TEST

/* The rows form without parts (row 2 of check_embed_form: NULL parts)
 * makes S and A of the query rows alone, and must still give the picked
 * rows of the full form, bit for bit, and the same tables' gradients. */
static void check_rows_only_case(int B, int T, int V, int dk, int dv)
{
    check_embed_form(B, T, V, dk, dv, 1, 0, 2);
}

START_TEST(test_embed_attention_rows_without_parts_equals_picked_rows)
{
    static const char *impls[] = {"portable", "avx2", "avx512"};
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(impls[im], NULL) != 0)
            continue;
        for (int threads = 1; threads <= 2; threads++) { /* each part its own S row */
            ck_assert_int_eq(qkv_threads_use(threads, NULL), 0);
            check_rows_only_case(4, 12, 7, 16, 16); /* the full form's fused kernels */
            check_rows_only_case(3, 21, 6, 16, 16);
            check_rows_only_case(3, 33, 6, 16, 16);
        }
        qkv_threads_use(1, NULL);
        check_rows_only_case(1, 1, 3, 4, 2);     /* one token: S is 1×1 */
        check_rows_only_case(2, 32, 6, 16, 300); /* dv past a depth block */
        check_rows_only_case(2, 50, 7, 64, 48);  /* S, A·V in the BLOCKS order */
        check_rows_only_case(2, 40, 5, 8, 3500); /* dA = dO·Vᵀ as dot products */
        check_rows_only_case(2, 20, 5, 3000, 8); /* S = Q·Kᵀ as dot products */
        check_rows_only_case(2, 256, 9, 8, 8);   /* a depth of one whole block */
        /* past one block (BLOCKS order): the full form, rows picked */
        check_rows_only_case(2, 260, 9, 48, 48);
        check_rows_only_case(2, 60, 9, 300, 16);
    }
    qkv_kernels_use("auto", NULL);
}
END_TEST

/* An infinite upstream gradient reaches every key's row of dWv, masked
 * ones too (0·inf is NaN), in the rows form with or without parts as in
 * the picked rows of the full form: skipping a key of weight 0 is only
 * for finite gradients. */
START_TEST(test_embed_attention_rows_spread_an_infinite_gradient)
{
    enum { B = 2, T = 6, V = 4, D = 3 };
    qkv_rng g;
    qkv_rng_seed(&g, 9);
    /* Wq and Wk take no gradient, so only dWv sees dO; id 3 stands only
     * at the masked keys, 4 and 5, of both items */
    qkv_tensor *wqk = random_tensor(&g, 2, (const int[]){V, D}, 0);
    qkv_tensor *wv = random_tensor(&g, 2, (const int[]){V, D}, 1);
    const int ids[B * T] = {0, 1, 2, 0, 3, 3, 0, 1, 2, 1, 3, 3}, query[B] = {1, 2};
    qkv_tensor *mask = qkv_tensor_new(3, (const int[]){B, 1, T}, 0, NULL);
    for (int e = 0; e < B * T; e++)
        mask->data[e] = e % T >= T - 2 ? -INFINITY : 0;
    const qkv_real dy[B * D] = {1, INFINITY, 2, 3, 4, 5};
    qkv_real *grads[3];
    for (int f = 0; f < 3; f++) { /* the full form picked, rows with parts, without */
        qkv_tape *t = qkv_tape_new(0, NULL);
        qkv_attention_parts parts;
        qkv_tensor_zero_grad(wv);
        qkv_tensor *o =
            f == 0 ? qkv_pick_rows(
                         t, qkv_embed_attention(t, wqk, wqk, wv, ids, B, T, mask, 0.5, NULL), query)
                   : qkv_embed_attention_rows(t, wqk, wqk, wv, ids, B, T, mask, 0.5, query,
                                              f == 1 ? &parts : NULL);
        ck_assert_int_eq(qkv_backward_from(t, o, dy, B * D), QKV_OK);
        grads[f] = malloc(sizeof(qkv_real) * wv->numel);
        memcpy(grads[f], wv->grad, sizeof(qkv_real) * wv->numel);
        qkv_tape_free(t);
    }
    ck_assert(isnan(grads[0][3 * D + 1])); /* 0·inf, from the masked keys */
    ck_assert(isfinite(grads[0][0]));
    assert_same(grads[1], grads[0], wv->numel, "dWv (parts)");
    assert_same(grads[2], grads[0], wv->numel, "dWv (no parts)");
    for (int f = 0; f < 3; f++)
        free(grads[f]);
    qkv_tensor_free(mask);
    qkv_tensor_free(wqk);
    qkv_tensor_free(wv);
}
END_TEST

/* A key with K = -inf takes weight 0 (S = -inf), and with one other key
 * of weight 1, dS's row is all zeros: dQ = dS·K then holds 0·-inf. The
 * rows form without parts gives the picked full form's dWq, NaN or not
 * (a set's fused backward skips a row of dS of zeros), on every kernel
 * set; O and dWv by hand: A = [1, 0], so O = V[0] = 1, dWv = [1, 0]. */
START_TEST(test_embed_attention_rows_without_parts_infinite_key)
{
    static const char *impls[] = {"portable", "avx2", "avx512"};
    const int ids[2] = {0, 1}, query[1] = {0};
    const qkv_real dy[1] = {1};
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(impls[im], NULL) != 0)
            continue;
        qkv_real got[2][7];
        for (int f = 0; f < 2; f++) { /* the full form picked, rows without parts */
            qkv_tensor *w[3];
            for (int i = 0; i < 3; i++)
                w[i] = qkv_tensor_new(2, (const int[]){2, 1}, 1, NULL);
            w[0]->data[0] = w[0]->data[1] = 1;
            w[1]->data[0] = 0;
            w[1]->data[1] = -INFINITY;
            w[2]->data[0] = 1;
            w[2]->data[1] = 2;
            qkv_tape *t = qkv_tape_new(0, NULL);
            qkv_tensor *o = f == 0 ? qkv_pick_rows(t,
                                                   qkv_embed_attention(t, w[0], w[1], w[2], ids, 1,
                                                                       2, NULL, 1.0, NULL),
                                                   query)
                                   : qkv_embed_attention_rows(t, w[0], w[1], w[2], ids, 1, 2, NULL,
                                                              1.0, query, NULL);
            ck_assert_int_eq(qkv_backward_from(t, o, dy, 1), QKV_OK);
            got[f][0] = o->data[0];
            for (int i = 0; i < 3; i++) {
                got[f][1 + 2 * i] = w[i]->grad[0];
                got[f][2 + 2 * i] = w[i]->grad[1];
            }
            qkv_tape_free(t);
            for (int i = 0; i < 3; i++)
                qkv_tensor_free(w[i]);
        }
        ck_assert(got[1][0] == 1 && got[1][5] == 1 && got[1][6] == 0);
        assert_same(got[1], got[0], 7, impls[im]);
    }
    qkv_kernels_use("auto", NULL);
}
END_TEST

/* Without parts, the rows form makes no [B,T,T] scores or weights (nor
 * their gradients): it records at least 4·B·T² reals fewer on the tape than
 * with them, when its chains allow; past one depth block it cannot. */
START_TEST(test_embed_attention_rows_without_parts_makes_no_scores)
{
    enum { B = 4, V = 5 };
    qkv_rng g;
    qkv_rng_seed(&g, 3);
    const int Ts[2] = {40, 260}, dks[2] = {16, 300};
    for (int c = 0; c < 2; c++) {
        const int T = Ts[c], dk = dks[c];
        qkv_tensor *w = random_tensor(&g, 2, (const int[]){V, dk}, 1);
        int *ids = calloc((size_t)B * T, sizeof *ids), query[B] = {0, 1, 2, 3};
        size_t used[2];
        for (int f = 0; f < 2; f++) {
            qkv_tape *t = qkv_tape_new(0, NULL);
            qkv_attention_parts parts;
            qkv_tensor *o =
                qkv_embed_attention_rows(t, w, w, w, ids, B, T, NULL, 1, query, f ? &parts : NULL);
            ck_assert_int_eq(qkv_backward(t, qkv_sum(t, o)), QKV_OK);
            used[f] = qkv_tape_bytes_used(t);
            qkv_tape_free(t);
        }
        const size_t st = 4 * sizeof(qkv_real) * B * (size_t)T * T; /* S, A and their grads */
        if (c == 0)
            ck_assert_msg(used[0] + st <= used[1], "T %d: %zu bytes without parts, %zu with", T,
                          used[0], used[1]);
        else /* dk past a block: S = Q·Kᵀ's row is not the full product's chain */
            ck_assert_msg(used[0] + st > used[1], "T %d: %zu bytes without parts, %zu with", T,
                          used[0], used[1]);
        free(ids);
        qkv_tensor_free(w);
    }
}
END_TEST

/* The rows form's output row has the bits of the picked row, signed zeros
 * too. With Wq = Wk = 0 every weight is 1/64, and each entry of V is the
 * least subnormal times -1, so every product A[r,j]·V[j,c] lies below
 * half of it and rounds to -0 (an FMA chain from zero stays -0 to the
 * end). With T and dv of 48 or more, O = A·V takes qkv_gemm's BLOCKS
 * order, which adds its one depth block to a zeroed C: 0 + (-0) = +0 in
 * the embedded form, whose row the rows form must give. */
START_TEST(test_embed_attention_rows_keeps_the_sign_of_zero)
{
    enum { T = 64, D = 48 };
    const qkv_real tiny = sizeof(qkv_real) == sizeof(float) ? FLT_TRUE_MIN : DBL_TRUE_MIN;
    static const char *impls[] = {"portable", "avx2", "avx512"};
    qkv_tensor *wq = qkv_tensor_new(2, (const int[]){2, D}, 0, NULL);
    qkv_tensor *wv = qkv_tensor_new(2, (const int[]){2, D}, 0, NULL);
    for (size_t e = 0; e < wv->numel; e++)
        wv->data[e] = -tiny;
    int ids[T], query[1] = {5};
    for (int i = 0; i < T; i++)
        ids[i] = i % 2;
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(impls[im], NULL) != 0)
            continue;
        qkv_tape *t = qkv_tape_new(0, NULL);
        qkv_tensor *full = qkv_embed_attention(t, wq, wq, wv, ids, 1, T, NULL, 1, NULL);
        qkv_tensor *rows = qkv_embed_attention_rows(t, wq, wq, wv, ids, 1, T, NULL, 1, query, NULL);
        ck_assert_msg(qkv_tape_status(t) == QKV_OK, "%s", qkv_tape_error(t));
        for (int c = 0; c < D; c++) {
            const qkv_real want = full->data[(size_t)query[0] * D + c];
            ck_assert_msg(want == 0 && !signbit(want), "%s: O[%d,%d] = %g, not +0", impls[im],
                          query[0], c, (double)want);
            ck_assert_msg(rows->data[c] == 0 && !signbit(rows->data[c]),
                          "%s: the rows form's O[%d] is %s0, not +0", impls[im], c,
                          signbit(rows->data[c]) ? "-" : "+");
        }
        qkv_tape_free(t);
    }
    qkv_kernels_use("auto", NULL);
    qkv_tensor_free(wq);
    qkv_tensor_free(wv);
}
END_TEST

/* ---- the heads form against slices, permutes and attention ----------- */

/* Q, K or V (part 0, 1, 2 of x [B,T,3D]) as [B,H,T,d_h] by the shape ops. */
static qkv_tensor *heads_by_ops(qkv_tape *t, qkv_tensor *x, int H, int part)
{
    const int B = x->shape[0], T = x->shape[1], D = x->shape[2] / 3;
    qkv_tensor *y =
        qkv_reshape(t, qkv_slice(t, x, 2, part * D, D), 4, (const int[]){B, T, H, D / H});
    return qkv_permute(t, y, (const int[]){0, 2, 1, 3});
}

/* qkv_attention_heads and the ops it stands for, on the same x, mask
 * (0 none, 1 padding [B,1,1,T], 2 causal [T,T]) and loss; with x_loss the
 * loss reads x too, so x's gradient is filled before attention adds to it.
 * Every result and gradient must be equal. With online, the online forms
 * of both (and a loss on O alone); online 2 also sets their causal flag. */
static void check_heads_case(int B, int T, int D, int H, int mask_kind, int x_loss, int online)
{
    qkv_rng g;
    qkv_rng_seed(&g, 21);
    qkv_tensor *x = random_tensor(&g, 3, (const int[]){B, T, 3 * D}, 1);
    qkv_tensor *mask = NULL;
    if (mask_kind == 1) {
        mask = qkv_tensor_new(4, (const int[]){B, 1, 1, T}, 0, NULL);
        for (int e = 0; e < B * T; e++)
            mask->data[e] = e % T >= T - (e / T) % 3 ? -INFINITY : 0;
    } else if (mask_kind == 2) {
        mask = qkv_tensor_new(2, (const int[]){T, T}, 0, NULL);
        for (int e = 0; e < T * T; e++)
            mask->data[e] = e % T > e / T ? -INFINITY : 0;
    }
    const double scale = 1 / sqrt((double)(D / H));
    qkv_tape *tp[2] = {qkv_tape_new(0, NULL), qkv_tape_new(0, NULL)};
    qkv_tensor *o[2];
    qkv_attention_parts parts[2];
    qkv_real *dx[2];
    for (int f = 0; f < 2; f++) {
        qkv_tape *t = tp[f];
        /* two steps on one tape: the second finds the first's gradients in
         * the arena, which a claimed gradient must not add to */
        for (int step = 0; step < 2; step++) {
            qkv_tape_reset(t);
            qkv_tensor_zero_grad(x);
            qkv_tensor *xs = qkv_scale(t, x, 0.5); /* on the tape, as a projection is */
            if (f == 0) {
                qkv_tensor *hq = heads_by_ops(t, xs, H, 0), *hk = heads_by_ops(t, xs, H, 1),
                           *hv = heads_by_ops(t, xs, H, 2);
                qkv_tensor *y = online
                                    ? qkv_attention_online(t, hq, hk, hv, mask, scale, online == 2)
                                    : qkv_attention(t, hq, hk, hv, mask, scale, &parts[f]);
                y = qkv_permute(t, y, (const int[]){0, 2, 1, 3});
                o[f] = qkv_reshape(t, y, 3, (const int[]){B, T, D});
            } else {
                o[f] = online ? qkv_attention_heads_online(t, xs, H, mask, scale, online == 2)
                              : qkv_attention_heads(t, xs, H, mask, scale, &parts[f]);
            }
            qkv_rng lw;
            qkv_rng_seed(&lw, 6);
            qkv_tensor *loss = weighted_sum(t, o[f], &lw);
            if (!online)
                loss = qkv_add(t, loss,
                               qkv_add(t, weighted_sum(t, parts[f].scores, &lw),
                                       weighted_sum(t, parts[f].attn, &lw)));
            if (x_loss)
                loss = qkv_add(t, loss, weighted_sum(t, xs, &lw));
            ck_assert_msg(qkv_backward(t, loss) == QKV_OK, "%s", qkv_tape_error(t));
        }
        dx[f] = malloc(sizeof(qkv_real) * x->numel);
        memcpy(dx[f], x->grad, sizeof(qkv_real) * x->numel);
    }
    ck_assert_int_eq(o[1]->ndim, 3);
    ck_assert_int_eq(o[1]->shape[2], D);
    assert_same(o[1]->data, o[0]->data, o[0]->numel, "O");
    if (!online) {
        ck_assert_int_eq(parts[1].attn->ndim, 4);
        ck_assert_int_eq(parts[1].attn->shape[1], H);
        assert_same(parts[1].scores->data, parts[0].scores->data, parts[0].scores->numel, "scores");
        assert_same(parts[1].attn->data, parts[0].attn->data, parts[0].attn->numel, "attn");
        assert_same(parts[1].attn->grad, parts[0].attn->grad, parts[0].attn->numel, "dattn");
    }
    assert_same(dx[1], dx[0], x->numel, "dx");
    double norm = 0;
    for (size_t e = 0; e < x->numel; e++)
        norm += fabs((double)dx[1][e]);
    ck_assert_msg(norm > 0, "dx is all zeros");
    free(dx[0]);
    free(dx[1]);
    qkv_tensor_free(x);
    qkv_tensor_free(mask);
    qkv_tape_free(tp[0]);
    qkv_tape_free(tp[1]);
}

START_TEST(test_attention_heads_equals_slices_and_permutes)
{
    static const char *impls[] = {"portable", "avx2", "avx512"};
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(impls[im], NULL) != 0)
            continue;
        for (int threads = 1; threads <= 2; threads++) {
            ck_assert_int_eq(qkv_threads_use(threads, NULL), 0);
            check_heads_case(2, 5, 12, 2, 2, 0, 0);  /* the fused register path */
            check_heads_case(3, 20, 16, 4, 1, 1, 0); /* the rows path, padding */
            check_heads_case(2, 7, 6, 1, 0, 0, 0);   /* one head, no mask */
            check_heads_case(2, 64, 64, 2, 2, 1, 0); /* the generic path, causal */
            qkv_attention_online_blocks(2, 3);
            check_heads_case(2, 7, 12, 2, 2, 1, 1); /* online, in blocks of 2×3 */
            qkv_attention_online_blocks(QKV_ONLINE_BQ, QKV_ONLINE_BK);
            check_heads_case(3, 20, 16, 4, 1, 0, 1);
            check_heads_case(2, 9, 8, 2, 1, 1, 2); /* causal by flag, and padding */
        }
    }
    qkv_threads_use(1, NULL);
    qkv_kernels_use("auto", NULL);
}
END_TEST

/* Enough work to split the items across 2 and 3 threads, which must
 * change nothing: the embedded form (forward split, backward in order) and
 * the plain form (both split). */
START_TEST(test_attention_same_on_any_thread_count)
{
    static const attn_case plain = {3, {96, 16, 64}, 16, 64, 1, 0, 1, 0.125};
    for (int threads = 1; threads <= 3; threads++) {
        ck_assert_int_eq(qkv_threads_use(threads, NULL), 0);
        check_embed_case(64, 16, 9, 64, 64, 1, 0);
        check_embed_case(64, 16, 9, 64, 64, 0, 1);
        check_attention_case(&plain);
    }
    qkv_threads_use(1, NULL);
}
END_TEST

/* A score that overflows to +inf meets a -inf mask entry: NaN, and the
 * row is NaN, in the fused op as in the unfused ops, on every kernel set;
 * the NaN last, where a maximum taken as max(mx, s_j) would end on the
 * padding keys' -inf. 3 keys (the AVX-512 register path, padded to 4), 20
 * (the rows path), 70 (rows of 5 chunks) and 300 (longer rows). */
START_TEST(test_attention_nan_score_as_unfused)
{
    static const char *impls[] = {"portable", "avx2", "avx512"};
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(impls[im], NULL) != 0)
            continue;
        static const int tks[] = {3, 20, 70, 300};
        for (size_t ti = 0; ti < sizeof tks / sizeof tks[0]; ti++) {
            const int tk = tks[ti];
            qkv_tensor *q = tensor_of(3, (const int[]){1, 3, 2}, NULL, 0);
            qkv_tensor *k = tensor_of(3, (const int[]){1, tk, 2}, NULL, 0);
            qkv_tensor *v = tensor_of(3, (const int[]){1, tk, 2}, NULL, 0);
            qkv_tensor *mask = tensor_of(3, (const int[]){1, 3, tk}, NULL, 0);
            for (size_t i = 0; i < q->numel; i++)
                q->data[i] = (qkv_real)(0.25 * (double)i - 0.5);
            for (size_t i = 0; i < k->numel; i++) {
                k->data[i] = (qkv_real)(0.125 * (double)(i % 7) - 0.25);
                v->data[i] = (qkv_real)(0.5 * (double)(i % 5));
            }
            /* row 0 · the last key = big² = +inf; its other scores finite */
            const qkv_real big = (qkv_real)(sizeof(qkv_real) == sizeof(float) ? 1e30 : 1e200);
            q->data[0] = big;
            k->data[2 * (tk - 1)] = big;
            k->data[2 * (tk - 1) + 1] = 0;
            mask->data[tk - 1] = -INFINITY;
            qkv_tape *t = qkv_tape_new(0, NULL);
            qkv_attention_parts p;
            qkv_tensor *o = qkv_attention(t, q, k, v, mask, 1, &p);
            qkv_tensor *a = qkv_softmax(t, qkv_mask(t, qkv_matmul_nt(t, q, k), mask));
            qkv_tensor *o2 = qkv_matmul(t, a, v);
            ck_assert_msg(qkv_tape_status(t) == QKV_OK, "%s", qkv_tape_error(t));
            for (int j = 0; j < tk; j++)
                ck_assert_msg(isnan(p.attn->data[j]), "%s tk=%d: A[0,%d] = %g", impls[im], tk, j,
                              (double)p.attn->data[j]);
            assert_same(p.attn->data, a->data, a->numel, "attn");
            assert_same(o->data, o2->data, o->numel, "O");
            qkv_tape_free(t);
            qkv_tensor_free(q);
            qkv_tensor_free(k);
            qkv_tensor_free(v);
            qkv_tensor_free(mask);
        }
    }
    qkv_kernels_use("auto", NULL);
}
END_TEST

/* The loss of the parts test: Σ w⊙(the scores or the weights) of one of
 * the three forms, the output itself unused. */
typedef struct parts_ctx {
    qkv_tensor *x, *y, *z, *w; /* q, k, v; or x [B,T,3D]; or the tables */
    int form, weights;         /* plain, heads, embedded; scores or weights */
} parts_ctx;

static qkv_tensor *parts_loss(qkv_tape *t, void *p)
{
    parts_ctx *c = p;
    static const int ids[6] = {0, 2, 1, 3, 3, 0};
    qkv_attention_parts parts;
    if (c->form == 0)
        qkv_attention(t, c->x, c->y, c->z, NULL, 0.6, &parts);
    else if (c->form == 1)
        qkv_attention_heads(t, c->x, 2, NULL, 0.6, &parts);
    else
        qkv_embed_attention(t, c->x, c->y, c->z, ids, 2, 3, NULL, 0.6, &parts);
    qkv_tensor *s = c->weights ? parts.attn : parts.scores;
    return qkv_sum(t, qkv_mul(t, qkv_reshape(t, s, 1, (const int[]){-1}), c->w));
}

/* A loss that reaches attention only through its scores or its weights
 * still reaches Q and K (backward skips a node only when none of its
 * outputs has a gradient): finite differences judge it in each form. */
START_TEST(test_attention_gradients_flow_from_the_parts_alone)
{
    qkv_rng g;
    qkv_rng_seed(&g, 31);
    qkv_tape *t = qkv_tape_new(0, NULL);
    for (int form = 0; form < 3; form++) {
        parts_ctx c = {0};
        c.form = form;
        int n_w = 2 * 3 * 3; /* [2,3,3] scores, or [2,2,3,3] with two heads */
        if (form == 0) {
            c.x = random_tensor(&g, 3, (const int[]){2, 3, 2}, 1);
            c.y = random_tensor(&g, 3, (const int[]){2, 3, 2}, 1);
            c.z = random_tensor(&g, 3, (const int[]){2, 3, 2}, 1);
        } else if (form == 1) {
            c.x = random_tensor(&g, 3, (const int[]){2, 3, 12}, 1);
            n_w *= 2;
        } else {
            c.x = random_tensor(&g, 2, (const int[]){4, 2}, 1);
            c.y = random_tensor(&g, 2, (const int[]){4, 2}, 1);
            c.z = random_tensor(&g, 2, (const int[]){4, 2}, 1);
        }
        c.w = random_tensor(&g, 1, (const int[]){n_w}, 0);
        qkv_tensor *params[2] = {c.x, c.y};
        for (c.weights = 0; c.weights < 2; c.weights++) {
            qkv_gradcheck_result res;
            ck_assert_int_eq(
                qkv_gradcheck(t, parts_loss, &c, params, form == 1 ? 1 : 2, 0, 0, 0, &res), QKV_OK);
            ck_assert_msg(res.passed && res.max_abs > 0, "form %d, %s: max rel %g", form,
                          c.weights ? "weights" : "scores", res.max_rel);
        }
        qkv_tensor_free(c.x);
        qkv_tensor_free(c.y);
        qkv_tensor_free(c.z);
        qkv_tensor_free(c.w);
    }
    qkv_tape_free(t);
}
END_TEST

START_TEST(test_attention_errors_name_the_shapes)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *a = tensor_of(3, (const int[]){2, 3, 4}, NULL, 0);
    qkv_tensor *b = tensor_of(3, (const int[]){3, 4, 5}, NULL, 0);
    qkv_tensor *w = tensor_of(2, (const int[]){5, 3}, NULL, 0);
    const int ids[2] = {1, 5};
    EXPECT_ERROR_ON(t, qkv_attention(t, a, b, b, NULL, 1, NULL), QKV_ERR_SHAPE,
                    "attention: q [2,3,4], k [3,4,5], v [3,4,5]: need [...,Tq,d], [...,Tk,d] and "
                    "[...,Tk,dv] with the same leading dimensions");
    EXPECT_ERROR_ON(t, qkv_attention(t, a, a, a, w, 1, NULL), QKV_ERR_SHAPE,
                    "attention: mask [5,3] does not broadcast to the scores [2,3,3]");
    EXPECT_ERROR_ON(t, qkv_attention_heads(t, a, 2, NULL, 1, NULL), QKV_ERR_SHAPE,
                    "attention_heads: x [2,3,4], heads 2: need [B,T,3D] with D a multiple of "
                    "the heads");
    EXPECT_ERROR_ON(t, qkv_attention_heads(t, w, 1, NULL, 1, NULL), QKV_ERR_SHAPE,
                    "attention_heads: x [5,3], heads 1: need [B,T,3D] with D a multiple of "
                    "the heads");
    EXPECT_ERROR_ON(t, qkv_embed_attention(t, w, w, w, ids, 1, 2, NULL, 1, NULL), QKV_ERR_ARG,
                    "embed_attention: id 5 at position 1 is outside [0,5) of the tables");
    EXPECT_ERROR_ON(t, qkv_embed_attention(t, w, a, w, ids, 1, 2, NULL, 1, NULL), QKV_ERR_SHAPE,
                    "embed_attention: tables [5,3], [2,3,4], [5,3] with ids [1,2]: need [V,d], "
                    "[V,d], [V,dv] and B, T >= 1");
    EXPECT_ERROR_ON(t, qkv_embed_attention(t, w, w, w, ids, 1, 0, NULL, 1, NULL), QKV_ERR_SHAPE,
                    "embed_attention: tables [5,3], [5,3], [5,3] with ids [1,0]: need [V,d], "
                    "[V,d], [V,dv] and B, T >= 1");
    EXPECT_ERROR_ON(t, qkv_embed_attention(t, w, w, w, ids, 0, 2, NULL, 1, NULL), QKV_ERR_SHAPE,
                    "embed_attention: tables [5,3], [5,3], [5,3] with ids [0,2]: need [V,d], "
                    "[V,d], [V,dv] and B, T >= 1");
    /* v must share q's leading dimensions and k's Tk; the heads must divide D */
    qkv_tensor *k = tensor_of(3, (const int[]){2, 5, 4}, NULL, 0);
    qkv_tensor *v_batch = tensor_of(3, (const int[]){3, 5, 6}, NULL, 0);
    qkv_tensor *v_tk = tensor_of(3, (const int[]){2, 6, 7}, NULL, 0);
    qkv_tensor *x6 = tensor_of(3, (const int[]){2, 3, 6}, NULL, 0);
    EXPECT_ERROR_ON(t, qkv_attention(t, a, k, v_batch, NULL, 1, NULL), QKV_ERR_SHAPE,
                    "attention: q [2,3,4], k [2,5,4], v [3,5,6]: need [...,Tq,d], [...,Tk,d] and "
                    "[...,Tk,dv] with the same leading dimensions");
    EXPECT_ERROR_ON(t, qkv_attention(t, a, k, v_tk, NULL, 1, NULL), QKV_ERR_SHAPE,
                    "attention: q [2,3,4], k [2,5,4], v [2,6,7]: need [...,Tq,d], [...,Tk,d] and "
                    "[...,Tk,dv] with the same leading dimensions");
    EXPECT_ERROR_ON(t, qkv_attention_heads(t, x6, 4, NULL, 1, NULL), QKV_ERR_SHAPE,
                    "attention_heads: x [2,3,6], heads 4: need [B,T,3D] with D a multiple of "
                    "the heads");
    /* an id is checked against the shortest table, here v's 2 rows */
    qkv_tensor *wv = tensor_of(2, (const int[]){2, 3}, NULL, 0);
    EXPECT_ERROR_ON(t, qkv_embed_attention(t, w, w, wv, (const int[]){1, 4}, 1, 2, NULL, 1, NULL),
                    QKV_ERR_ARG,
                    "embed_attention: id 4 at position 1 is outside [0,2) of the tables");
    /* the rows form: its own name, and its query rows checked */
    const int ok_ids[4] = {1, 0, 2, 1}, query[2] = {1, 2};
    EXPECT_ERROR_ON(t, qkv_embed_attention_rows(t, w, w, w, ok_ids, 2, 2, NULL, 1, query, NULL),
                    QKV_ERR_ARG, "embed_attention_rows: query row 2 of item 1 is outside [0,2)");
    EXPECT_ERROR_ON(
        t, qkv_embed_attention_rows(t, w, w, w, ok_ids, 2, 2, NULL, 1, (const int[]){-1, 0}, NULL),
        QKV_ERR_ARG, "embed_attention_rows: query row -1 of item 0 is outside [0,2)");
    EXPECT_ERROR_ON(t, qkv_embed_attention_rows(t, w, w, w, ok_ids, 2, 2, NULL, 1, NULL, NULL),
                    QKV_ERR_ARG, "embed_attention_rows: no query rows");
    /* NULL ids: a missing argument, not a shape; it said QKV_ERR_SHAPE and
     * "tables [5,3], [5,3], [5,3] with ids [1,2]: need [V,d], [V,d], [V,dv]
     * and B, T >= 1" of tables and sizes that were right */
    EXPECT_ERROR_ON(t, qkv_embed_attention(t, w, w, w, NULL, 1, 2, NULL, 1, NULL), QKV_ERR_ARG,
                    "embed_attention: no ids (ids is NULL)");
    EXPECT_ERROR_ON(t, qkv_embed_attention_rows(t, w, w, w, NULL, 2, 2, NULL, 1, query, NULL),
                    QKV_ERR_ARG, "embed_attention_rows: no ids (ids is NULL)");
    EXPECT_ERROR_ON(t, qkv_embed_attention_rows(t, w, w, w, ids, 1, 2, NULL, 1, query, NULL),
                    QKV_ERR_ARG,
                    "embed_attention_rows: id 5 at position 1 is outside [0,5) of the tables");
    qkv_tensor_free(k);
    qkv_tensor_free(v_batch);
    qkv_tensor_free(v_tk);
    qkv_tensor_free(x6);
    qkv_tensor_free(wv);
    qkv_tensor_free(a);
    qkv_tensor_free(b);
    qkv_tensor_free(w);
    qkv_tape_free(t);
}
END_TEST

/* A scale that is not finite is refused, as qkv_scale refuses it, by every
 * form: a NaN scale made every score NaN, and the rows came out zero with
 * no error. */
/* A mask of one value per query row, [Tq,1], read along the keys with
 * stride 0 (the generic path's general case), on every kernel set: row 0
 * kept, row 1 all -inf. With Q = K = I, V = [[1,2],[3,4]] and scale 1, row
 * 0's weights are softmax([1, 0]) = [e, 1]/(e + 1), so O[0] = [(e + 3),
 * (2e + 4)]/(e + 1); row 1, fully masked, is zeros. */
START_TEST(test_attention_takes_a_mask_per_query_row)
{
    static const char *impls[] = {"portable", "avx2", "avx512"};
    qkv_tensor *qk = tensor_of(2, (const int[]){2, 2}, (const double[]){1, 0, 0, 1}, 0);
    qkv_tensor *v = tensor_of(2, (const int[]){2, 2}, (const double[]){1, 2, 3, 4}, 0);
    qkv_tensor *m = tensor_of(2, (const int[]){2, 1}, (const double[]){0, -INFINITY}, 0);
    const double e = exp(1.0);
    const double want[4] = {(e + 3) / (e + 1), (2 * e + 4) / (e + 1), 0, 0};
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(impls[im], NULL) != 0)
            continue;
        qkv_tape *t = qkv_tape_new(0, NULL);
        qkv_tensor *o = qkv_attention(t, qk, qk, v, m, 1, NULL);
        ck_assert_msg(qkv_tape_status(t) == QKV_OK, "%s", qkv_tape_error(t));
        for (int i = 0; i < 4; i++)
            ck_assert_msg(fabs((double)o->data[i] - want[i]) <= 8 * REAL_EPS,
                          "%s: O[%d] = %.9g, expected %.9g", impls[im], i, (double)o->data[i],
                          want[i]);
        qkv_tape_free(t);
    }
    qkv_kernels_use("auto", NULL);
    qkv_tensor_free(qk);
    qkv_tensor_free(v);
    qkv_tensor_free(m);
}
END_TEST

/* A finite mask value, however large and negative, is added as it is (as
 * qkv_mask adds it): only -inf drops a key. With Q = 0 every logit is the
 * mask's value: even rows hold -1e9 at every key, so their weights are
 * uniform over all tk keys; odd rows hold -inf below key s and -1e9 from
 * there, uniform over the last tk - s. Then O[i] = the mean of those rows
 * of V, and in double dV = Aᵀ·dO, dA = dO·Vᵀ, dS = c·A ⊙ (dA - Σ A⊙dA)
 * row by row and dQ = dS·K; dK = dSᵀ·Q = 0. The fused and online forms,
 * every kernel set: tk = 9 (the register paths) and 300 with tq = 70,
 * past the online form's default blocks of 64 rows and 256 keys, where
 * every entry of some blocks is -1e9 (such a block must still be read). */
static void check_finite_mask(int tq, int tk, int online)
{
    const int dk = 3, dv = 2, s = tk > 256 ? 256 : tk / 2;
    const double c = 0.5;
    qkv_tensor *q = tensor_of(3, (const int[]){1, tq, dk}, NULL, 1);
    qkv_tensor *k = tensor_of(3, (const int[]){1, tk, dk}, NULL, 1);
    qkv_tensor *v = tensor_of(3, (const int[]){1, tk, dv}, NULL, 1);
    qkv_tensor *m = tensor_of(2, (const int[]){tq, tk}, NULL, 0);
    qkv_real *dy = malloc(sizeof *dy * (size_t)tq * dv);
    for (int j = 0; j < tk; j++) {
        for (int p = 0; p < dk; p++)
            k->data[j * dk + p] = (qkv_real)(((j * 7 + p * 3) % 11 - 5) / 4.0);
        for (int p = 0; p < dv; p++)
            v->data[j * dv + p] = (qkv_real)(((j * 5 + p) % 9 - 4) / 2.0);
    }
    for (int i = 0; i < tq; i++) {
        for (int j = 0; j < tk; j++)
            m->data[i * tk + j] = (qkv_real)(i % 2 == 1 && j < s ? -INFINITY : -1e9);
        for (int p = 0; p < dv; p++)
            dy[i * dv + p] = (qkv_real)(((i * 3 + p) % 7 - 3) / 2.0);
    }
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *o =
        online ? qkv_attention_online(t, q, k, v, m, c, 0) : qkv_attention(t, q, k, v, m, c, NULL);
    ck_assert_msg(qkv_tape_status(t) == QKV_OK, "%s", qkv_tape_error(t));
    ck_assert_int_eq(qkv_backward_from(t, o, dy, (size_t)tq * dv), QKV_OK);
    const double tol = (4.0 * tk + 64) * REAL_EPS;
    double *gq = calloc((size_t)tq * dk, sizeof *gq), *mq = calloc((size_t)tq * dk, sizeof *mq);
    double *gv = calloc((size_t)tk * dv, sizeof *gv), *mv = calloc((size_t)tk * dv, sizeof *mv);
    double *da = malloc(sizeof *da * (size_t)tk);
    for (int i = 0; i < tq; i++) {
        const int j0 = i % 2 == 1 ? s : 0;
        const double a = 1.0 / (tk - j0);
        for (int p = 0; p < dv; p++) { /* O[i] = a·Σ_j V[j] */
            double y = 0, my = 0;
            for (int j = j0; j < tk; j++) {
                y += a * v->data[j * dv + p];
                my += a * fabs((double)v->data[j * dv + p]);
            }
            CHECK_EACH(fabs((double)o->data[i * dv + p] - y) <= tol * my,
                       "%s tq=%d tk=%d: O[%d,%d] = %.9g, expected %.9g",
                       online ? "online" : "fused", tq, tk, i, p, (double)o->data[i * dv + p], y);
        }
        double dot = 0, mdot = 0;
        for (int j = j0; j < tk; j++) {
            da[j] = 0;
            for (int p = 0; p < dv; p++) {
                da[j] += (double)dy[i * dv + p] * v->data[j * dv + p];
                gv[j * dv + p] += a * dy[i * dv + p];
                mv[j * dv + p] += a * fabs((double)dy[i * dv + p]);
            }
            dot += a * da[j];
            mdot += a * fabs(da[j]);
        }
        for (int j = j0; j < tk; j++)
            for (int p = 0; p < dk; p++) {
                gq[i * dk + p] += c * a * (da[j] - dot) * k->data[j * dk + p];
                mq[i * dk + p] += c * a * (fabs(da[j]) + mdot) * fabs((double)k->data[j * dk + p]);
            }
    }
    for (int e = 0; e < tq * dk; e++)
        CHECK_EACH(fabs((double)q->grad[e] - gq[e]) <= tol * mq[e],
                   "%s tq=%d tk=%d: dQ[%d] = %.9g, expected %.9g", online ? "online" : "fused", tq,
                   tk, e, (double)q->grad[e], gq[e]);
    for (int e = 0; e < tk * dk; e++)
        CHECK_EACH(k->grad[e] == 0, "%s tq=%d tk=%d: dK[%d] = %g, expected 0",
                   online ? "online" : "fused", tq, tk, e, (double)k->grad[e]);
    for (int e = 0; e < tk * dv; e++)
        CHECK_EACH(fabs((double)v->grad[e] - gv[e]) <= tol * mv[e],
                   "%s tq=%d tk=%d: dV[%d] = %.9g, expected %.9g", online ? "online" : "fused", tq,
                   tk, e, (double)v->grad[e], gv[e]);
    free(gq);
    free(mq);
    free(gv);
    free(mv);
    free(da);
    free(dy);
    qkv_tape_free(t);
    qkv_tensor_free(q);
    qkv_tensor_free(k);
    qkv_tensor_free(v);
    qkv_tensor_free(m);
}

START_TEST(test_attention_adds_a_finite_mask_as_it_is)
{
    static const char *impls[] = {"portable", "avx2", "avx512"};
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(impls[im], NULL) != 0)
            continue;
        for (int online = 0; online < 2; online++) {
            check_finite_mask(5, 9, online);
            check_finite_mask(70, 300, online);
        }
    }
    qkv_kernels_use("auto", NULL);
}
END_TEST

/* A row of dO of zeros adds nothing to any gradient, on every kernel set
 * and path (ops.h), also where V holds an infinity, which the unfused
 * ops would multiply by its 0: V[0,0] = +inf and dO zero but for row 1.
 * Row 1's weights meet the infinity, so its dQ row and dK are NaN; the
 * other rows of dQ stay 0 and dV stays finite. 4 keys (the register
 * kernels) and 20 (the generic path). */
START_TEST(test_attention_skips_zero_rows_of_do_by_an_infinite_value)
{
    static const char *impls[] = {"portable", "avx2", "avx512"};
    static const int tks[2] = {4, 20};
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(impls[im], NULL) != 0)
            continue;
        for (int n = 0; n < 2; n++) {
            const int tk = tks[n];
            qkv_tensor *q = tensor_of(3, (const int[]){1, 4, 2}, NULL, 1);
            qkv_tensor *k = tensor_of(3, (const int[]){1, tk, 2}, NULL, 1);
            qkv_tensor *v = tensor_of(3, (const int[]){1, tk, 2}, NULL, 1);
            for (int e = 0; e < 8; e++)
                q->data[e] = (qkv_real)(0.125 * e);
            for (int e = 0; e < 2 * tk; e++) {
                k->data[e] = (qkv_real)(0.25 - 0.0625 * e);
                v->data[e] = (qkv_real)e;
            }
            v->data[0] = INFINITY;
            const qkv_real dy[8] = {0, 0, 1, 1, 0, 0, 0, 0};
            qkv_tape *t = qkv_tape_new(0, NULL);
            qkv_tensor *o = qkv_attention(t, q, k, v, NULL, 1, NULL);
            ck_assert_int_eq(qkv_backward_from(t, o, dy, 8), QKV_OK);
            for (int e = 0; e < 8; e++)
                CHECK_EACH(e / 2 == 1 ? isnan(q->grad[e]) : q->grad[e] == 0,
                           "%s tk=%d: dQ[%d,%d] = %g, expected %s", impls[im], tk, e / 2, e % 2,
                           (double)q->grad[e], e / 2 == 1 ? "NaN" : "0");
            for (int e = 0; e < 2 * tk; e++)
                CHECK_EACH(isfinite(v->grad[e]), "%s tk=%d: dV[%d] = %g", impls[im], tk, e,
                           (double)v->grad[e]);
            qkv_tape_free(t);
            qkv_tensor_free(q);
            qkv_tensor_free(k);
            qkv_tensor_free(v);
        }
    }
    qkv_kernels_use("auto", NULL);
}
END_TEST

/* Attention adds its gradients into Q's, K's and V's where later
 * consumers have filled them first: L = Σ O + Σ Q + Σ K + Σ V with Q = K
 * = I, V = [[1,2],[3,4]], scale 1. A's rows are [p, 1-p] and [1-p, p]
 * with p = e/(e + 1), so dV = Aᵀ·1 + 1 = 2 everywhere; dA = 1·Vᵀ has
 * rows [3, 7], so dS = A ⊙ (dA - Σ dA⊙A) = [-4q, 4q] in each row with q =
 * p(1-p); dQ = dS·K + 1 = dS + 1 and dK = dSᵀ·Q + 1 = dSᵀ + 1. */
START_TEST(test_attention_gradients_add_to_other_consumers)
{
    static const char *impls[] = {"portable", "avx2", "avx512"};
    const double e = exp(1.0), c = 4 * e / ((e + 1) * (e + 1));
    const double want[3][4] = {
        {1 - c, 1 + c, 1 - c, 1 + c}, {1 - c, 1 - c, 1 + c, 1 + c}, {2, 2, 2, 2}};
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(impls[im], NULL) != 0)
            continue;
        qkv_tensor *x[3] = {tensor_of(2, (const int[]){2, 2}, (const double[]){1, 0, 0, 1}, 1),
                            tensor_of(2, (const int[]){2, 2}, (const double[]){1, 0, 0, 1}, 1),
                            tensor_of(2, (const int[]){2, 2}, (const double[]){1, 2, 3, 4}, 1)};
        qkv_tape *t = qkv_tape_new(0, NULL);
        qkv_tensor *l = qkv_sum(t, qkv_attention(t, x[0], x[1], x[2], NULL, 1, NULL));
        for (int i = 0; i < 3; i++)
            l = qkv_add(t, l, qkv_sum(t, x[i]));
        ck_assert_int_eq(qkv_backward(t, l), QKV_OK);
        for (int i = 0; i < 3; i++) {
            for (int j = 0; j < 4; j++)
                ck_assert_msg(fabs((double)x[i]->grad[j] - want[i][j]) <= 16 * REAL_EPS,
                              "%s: d%c[%d] = %.9g, expected %.9g", impls[im], "QKV"[i], j,
                              (double)x[i] -> grad[j], want[i][j]);
            qkv_tensor_free(x[i]);
        }
        qkv_tape_free(t);
    }
    qkv_kernels_use("auto", NULL);
}
END_TEST

/* The embedded form's one-row backward finds a row of dO live by its
 * last entry alone: Wq = Wk = 0 give uniform weights 1/2 over T = 2 keys,
 * so dO with only O[1][1] = 1 gives dWv[id][1] = 1/2 for each key's id. */
START_TEST(test_embed_attention_sees_a_row_live_by_its_last_entry)
{
    static const char *impls[] = {"portable", "avx2", "avx512"};
    const int ids[2] = {0, 1};
    const qkv_real dy[4] = {0, 0, 0, 1};
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(impls[im], NULL) != 0)
            continue;
        qkv_tensor *wq = tensor_of(2, (const int[]){2, 2}, NULL, 1);
        qkv_tensor *wk = tensor_of(2, (const int[]){2, 2}, NULL, 1);
        qkv_tensor *wv = tensor_of(2, (const int[]){2, 2}, (const double[]){1, 2, 3, 4}, 1);
        qkv_tape *t = qkv_tape_new(0, NULL);
        qkv_tensor *o = qkv_embed_attention(t, wq, wk, wv, ids, 1, 2, NULL, 1, NULL);
        ck_assert_int_eq(qkv_backward_from(t, o, dy, 4), QKV_OK);
        const double want[4] = {0, 0.5, 0, 0.5};
        for (int j = 0; j < 4; j++)
            ck_assert_msg(wv->grad[j] == want[j], "%s: dWv[%d] = %.9g, expected %g", impls[im], j,
                          (double)wv->grad[j], want[j]);
        qkv_tape_free(t);
        qkv_tensor_free(wq);
        qkv_tensor_free(wk);
        qkv_tensor_free(wv);
    }
    qkv_kernels_use("auto", NULL);
}
END_TEST

START_TEST(test_attention_refuses_a_scale_not_finite)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *a = tensor_of(3, (const int[]){1, 2, 6}, NULL, 1);
    qkv_tensor *w = tensor_of(2, (const int[]){3, 2}, NULL, 1);
    const int ids[2] = {0, 2};
    EXPECT_ERROR_ON(t, qkv_attention(t, a, a, a, NULL, NAN, NULL), QKV_ERR_ARG,
                    "attention: the scale NaN is not finite");
    EXPECT_ERROR_ON(t, qkv_attention_online(t, a, a, a, NULL, INFINITY, 0), QKV_ERR_ARG,
                    "attention_online: the scale infinity is not finite");
    EXPECT_ERROR_ON(t, qkv_attention_heads(t, a, 1, NULL, -INFINITY, NULL), QKV_ERR_ARG,
                    "attention_heads: the scale -infinity is not finite");
    EXPECT_ERROR_ON(t, qkv_attention_heads_online(t, a, 2, NULL, NAN, 1), QKV_ERR_ARG,
                    "attention_heads_online: the scale NaN is not finite");
    EXPECT_ERROR_ON(t, qkv_embed_attention(t, w, w, w, ids, 1, 2, NULL, INFINITY, NULL),
                    QKV_ERR_ARG, "embed_attention: the scale infinity is not finite");
    qkv_tensor_free(a);
    qkv_tensor_free(w);
    qkv_tape_free(t);
}
END_TEST

/* ---- the online form against a double reference ------------------------ */

typedef struct online_case {
    int B, tq, tk, dk, dv;
    int mask;     /* 0 none, 1 random [B,Tq,Tk] with one row all -inf, 2 causal [Tq,Tk],
                   * 3 padding [B,1,Tk] */
    int bq, bk;   /* blocks; 0 for the defaults */
    double scale; /* c */
    double qmag;  /* Q's standard deviation: large logits make the maximum move */
    int one_row;  /* the loss reads one row of O per item: blocks of dead rows */
    int causal;   /* the op's causal flag: keys j > i dropped too */
    int exact;    /* Q and K small integers (scale and qmag 1) with Q[:,0]·K[:,0]
                   * = 3072: every score is exact, and every row's ln Σ e^x
                   * is near 3072, where one float ulp is 2^-12 */
} online_case;

static qkv_tensor *online_mask(const online_case *c, qkv_rng *g)
{
    if (c->mask == 0)
        return NULL;
    qkv_tensor *m = c->mask == 1   ? qkv_tensor_new(3, (const int[]){c->B, c->tq, c->tk}, 0, NULL)
                    : c->mask == 2 ? qkv_tensor_new(2, (const int[]){c->tq, c->tk}, 0, NULL)
                                   : qkv_tensor_new(3, (const int[]){c->B, 1, c->tk}, 0, NULL);
    for (size_t e = 0; e < m->numel; e++) {
        const int j = (int)(e % (size_t)c->tk), i = (int)(e / (size_t)c->tk) % c->tq;
        int drop = c->mask == 1   ? qkv_rng_random(g) < 0.3 || i == 1
                   : c->mask == 2 ? j > i
                                  : j >= c->tk - 1 - (int)(e / (size_t)c->tk) * 3;
        m->data[e] = drop ? -INFINITY : 0;
    }
    return m;
}

/* The mask entry of item b, row i, key j (0 with no mask), -inf past the
 * diagonal with the causal flag. */
static double online_mask_at(const online_case *c, const qkv_tensor *m, int b, int i, int j)
{
    if (c->causal && j > i)
        return -INFINITY;
    if (m == NULL)
        return 0;
    if (c->mask == 1)
        return m->data[((size_t)b * c->tq + i) * c->tk + j];
    if (c->mask == 2)
        return m->data[(size_t)i * c->tk + j];
    return m->data[(size_t)b * c->tk + j];
}

/* γ(n) = n·u/(1 - n·u), the bound on n roundings. */
static double gam(double n)
{
    return n * REAL_EPS / (1 - n * REAL_EPS);
}

/* One case on the kernel set in use: O and dQ, dK, dV (from the loss Σ
 * O∘W) against attention computed in double from the same inputs, each
 * element within a bound made of the inputs, from a first-order count of
 * the roundings (with a margin for the terms of second order; the worst
 * error seen is under a tenth of it):
 * - S = Q·Kᵀ in qkv_real carries γ(d_k)·Σ|Q_ip·K_jp|, and c·S and the mask
 *   add one rounding each: e_ij in the logit x_ij; a softmax moves by at
 *   most a factor e^(2·max e) - 1 ≈ 2.5·E. With exact set, the products
 *   and sums of integers below 2^24, c = 1 and a mask of 0 and -inf are
 *   all exact: E = 0.
 * - Each weight e^(x - m) carries its subtraction's rounding (u·|x - m|)
 *   and the exponential's 2 ulp (kernels.h), in P and again in l.
 * - P·V over tk keys, added into O block by block and rescaled once per
 *   block, then divided by l: (tk + 3·blocks + 14 + 2·spread)·u + 2.5·E
 *   of Σ_j A_ij·|V_jp|.
 * - Backward recomputes P from S (E again) and the row's maximum and
 *   1/l, which it keeps (O's error again, and three roundings: of 1/l,
 *   and of it times c and times dO; nothing of the size of u·|ln Σ e^x|,
 *   which the exact cases would show), then adds the products dP = dO·Vᵀ,
 *   D = dO·O, dS·K and dSᵀ·Q: twice the forward's factor plus their
 *   lengths in roundings, of the sums of the terms' magnitudes. */
static void check_online_case(const online_case *c)
{
    const int B = c->B, tq = c->tq, tk = c->tk, dk = c->dk, dv = c->dv;
    qkv_rng g;
    qkv_rng_seed(&g, (uint64_t)(tq * 1000 + tk));
    qkv_tensor *q = random_tensor(&g, 3, (const int[]){B, tq, dk}, 1);
    qkv_tensor *k = random_tensor(&g, 3, (const int[]){B, tk, dk}, 1);
    qkv_tensor *v = random_tensor(&g, 3, (const int[]){B, tk, dv}, 1);
    for (size_t e = 0; e < q->numel; e++)
        q->data[e] = (qkv_real)(q->data[e] * c->qmag);
    for (size_t e = 0; c->exact && e < q->numel; e++) /* 48 or -2..2 */
        q->data[e] = e % (size_t)dk == 0 ? 48 : (qkv_real)floor(5 * qkv_rng_random(&g)) - 2;
    for (size_t e = 0; c->exact && e < k->numel; e++) /* 64 or -2..2 */
        k->data[e] = e % (size_t)dk == 0 ? 64 : (qkv_real)floor(5 * qkv_rng_random(&g)) - 2;
    qkv_tensor *mask = online_mask(c, &g);
    qkv_tensor *w = random_tensor(&g, 3, (const int[]){B, tq, dv}, 0);
    if (c->one_row)
        for (size_t e = 0; e < w->numel; e++)
            if ((int)(e / (size_t)dv) % tq != tq / 2)
                w->data[e] = 0;
    int bq = c->bq, bk = c->bk;
    if (bq > 0)
        qkv_attention_online_blocks(bq, bk);
    qkv_attention_online_block_sizes(tq, tk, &bq, &bk);
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *o = qkv_attention_online(t, q, k, v, mask, c->scale, c->causal);
    qkv_attention_online_blocks(QKV_ONLINE_BQ, QKV_ONLINE_BK);
    ck_assert_msg(qkv_tape_status(t) == QKV_OK, "%s", qkv_tape_error(t));
    ck_assert_int_eq(qkv_backward_from(t, o, w->data, w->numel), QKV_OK);
    const double u = REAL_EPS, nb = (double)((tk + bk - 1) / bk);
    double *x = malloc(sizeof *x * (size_t)tk), *a = malloc(sizeof *a * (size_t)tk);
    double *gs = malloc(sizeof *gs * (size_t)tq * tk), *ds = malloc(sizeof *ds * (size_t)tq * tk);
    double *oref = malloc(sizeof *oref * (size_t)tq * dv),
           *mo = malloc(sizeof *mo * (size_t)tq * dv);
    double *fb = malloc(sizeof *fb * (size_t)tq), *aa = malloc(sizeof *aa * (size_t)tq * tk);
    for (int b = 0; b < B; b++) {
        const qkv_real *qb = q->data + (size_t)b * tq * dk, *kb = k->data + (size_t)b * tk * dk;
        const qkv_real *vb = v->data + (size_t)b * tk * dv, *wb = w->data + (size_t)b * tq * dv;
        const qkv_real *ob = o->data + (size_t)b * tq * dv;
        double fbmax = 0;
        for (int i = 0; i < tq; i++) { /* the forward, row by row */
            double mx = -INFINITY, E = 0;
            for (int j = 0; j < tk; j++) {
                double s = 0, sa = 0;
                for (int p = 0; p < dk; p++) {
                    s += (double)qb[i * dk + p] * kb[j * dk + p];
                    sa += fabs((double)qb[i * dk + p] * kb[j * dk + p]);
                }
                x[j] = c->scale * s + online_mask_at(c, mask, b, i, j);
                if (isfinite(x[j])) {
                    if (!c->exact)
                        E = fmax(E, c->scale * gam(dk) * sa + 2 * u * fabs(c->scale * s) + u);
                    mx = fmax(mx, x[j]);
                }
            }
            double sum = 0, spread = 0;
            for (int j = 0; j < tk; j++) {
                a[j] = mx == -INFINITY ? 0 : exp(x[j] - mx);
                sum += a[j];
                if (a[j] > 0)
                    spread = fmax(spread, fabs(x[j] - mx));
            }
            const double ff = (tk + 3 * nb + 14 + 2 * spread) * u + 2.5 * E;
            fb[i] = 2 * ff + (tq + tk + dk + dv + 17) * u + 2.5 * E;
            fbmax = fmax(fbmax, fb[i]);
            for (int j = 0; j < tk; j++)
                aa[i * tk + j] = sum > 0 ? a[j] / sum : 0;
            for (int p = 0; p < dv; p++) {
                double y = 0, my = 0;
                for (int j = 0; j < tk; j++) {
                    const double aj = aa[i * tk + j];
                    y += aj * vb[j * dv + p];
                    my += aj * fabs((double)vb[j * dv + p]);
                }
                oref[i * dv + p] = y;
                mo[i * dv + p] = my;
                ck_assert_msg(fabs(ob[i * dv + p] - y) <= ff * my + 1e-300,
                              "item %d O[%d,%d] = %.9g, want %.9g within %.3g", b, i, p,
                              (double)ob[i * dv + p], y, ff * my);
            }
            double dsum = 0; /* D = Σ dO∘O, and dS = c·A∘(dP - D) with its magnitude */
            for (int p = 0; p < dv; p++)
                dsum += (double)wb[i * dv + p] * oref[i * dv + p];
            for (int j = 0; j < tk; j++) {
                double dp = 0, mp = 0;
                for (int p = 0; p < dv; p++) {
                    dp += (double)wb[i * dv + p] * vb[j * dv + p];
                    mp += fabs((double)wb[i * dv + p] * vb[j * dv + p]) +
                          fabs((double)wb[i * dv + p]) * mo[i * dv + p];
                }
                const double aj = aa[i * tk + j];
                ds[i * tk + j] = c->scale * aj * (dp - dsum);
                gs[i * tk + j] = c->scale * aj * mp;
            }
        }
        const qkv_real *gq = q->grad + (size_t)b * tq * dk, *gk = k->grad + (size_t)b * tk * dk,
                       *gv = v->grad + (size_t)b * tk * dv;
        for (int i = 0; i < tq; i++)
            for (int p = 0; p < dk; p++) {
                double y = 0, my = 0;
                for (int j = 0; j < tk; j++) {
                    y += ds[i * tk + j] * kb[j * dk + p];
                    my += gs[i * tk + j] * fabs((double)kb[j * dk + p]);
                }
                ck_assert_msg(fabs(gq[i * dk + p] - y) <= fb[i] * my + 1e-300,
                              "item %d dQ[%d,%d] = %.9g, want %.9g within %.3g", b, i, p,
                              (double)gq[i * dk + p], y, fb[i] * my);
            }
        for (int j = 0; j < tk; j++) {
            for (int p = 0; p < dk; p++) {
                double y = 0, my = 0;
                for (int i = 0; i < tq; i++) {
                    y += ds[i * tk + j] * qb[i * dk + p];
                    my += gs[i * tk + j] * fabs((double)qb[i * dk + p]);
                }
                ck_assert_msg(fabs(gk[j * dk + p] - y) <= fbmax * my + 1e-300,
                              "item %d dK[%d,%d] = %.9g, want %.9g within %.3g", b, j, p,
                              (double)gk[j * dk + p], y, fbmax * my);
            }
            for (int p = 0; p < dv; p++) { /* dV = Aᵀ·dO */
                double y = 0, my = 0;
                for (int i = 0; i < tq; i++) {
                    y += aa[i * tk + j] * wb[i * dv + p];
                    my += aa[i * tk + j] * fabs((double)wb[i * dv + p]);
                }
                ck_assert_msg(fabs(gv[j * dv + p] - y) <= fbmax * my + 1e-300,
                              "item %d dV[%d,%d] = %.9g, want %.9g within %.3g", b, j, p,
                              (double)gv[j * dv + p], y, fbmax * my);
            }
        }
    }
    free(x);
    free(a);
    free(gs);
    free(ds);
    free(oref);
    free(mo);
    free(fb);
    free(aa);
    qkv_tape_free(t);
    qkv_tensor_free(q);
    qkv_tensor_free(k);
    qkv_tensor_free(v);
    qkv_tensor_free(w);
    qkv_tensor_free(mask);
}

/* Every kernel set: the blocks cross rows and keys (one by one, uneven,
 * and the defaults over 130×300), masks of every layout with a row all
 * masked, large logits whose maximum grows from block to block, a loss
 * on one row (the other blocks of rows skipped), and exact logits near
 * 3072, where ln Σ e^x rounded to a float would move every weight by up
 * to 2^-13 (over 2000·u) against a bound of some 150·u. */
START_TEST(test_attention_online_within_its_bound)
{
    static const online_case cases[] = {
        {2, 5, 7, 3, 4, 1, 2, 3, 0.5, 1, 0, 0, 0},
        {2, 33, 33, 8, 8, 2, 1, 1, 0.35, 1, 0, 0, 0},
        {1, 130, 300, 16, 8, 0, 0, 0, 0.25, 1, 0, 0, 0},
        {3, 20, 40, 8, 4, 3, 8, 16, 1, 4, 0, 0, 0},
        {3, 20, 40, 8, 4, 3, 8, 16, 1, 4, 1, 0, 0},
        {2, 70, 9, 5, 6, 1, 64, 4, 0.7, 2, 1, 0, 0},
        {2, 40, 40, 8, 8, 0, 4, 3, 0.5, 2, 0, 1, 0},
        {2, 12, 30, 4, 4, 3, 5, 7, 1, 3, 0, 1, 0},
        {4, 6, 9, 3, 4, 0, 0, 0, 1, 1, 0, 0, 1},
        {4, 6, 9, 3, 4, 1, 2, 4, 1, 1, 1, 1, 1},
    };
    static const char *impls[] = {"portable", "avx2", "avx512"};
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(impls[im], NULL) != 0)
            continue;
        for (size_t n = 0; n < sizeof cases / sizeof cases[0]; n++)
            check_online_case(&cases[n]);
    }
    qkv_kernels_use("auto", NULL);
}
END_TEST

/* A NaN score makes its row NaN in the online form, as in qkv_softmax
 * (and so in qkv_attention), also where every other score of its block is
 * NaN or -inf, so that the running maximum, which skips NaN as
 * qkv_softmax's does, is still -inf there, and the row's maximum comes
 * from a later block; a row of NaN and -inf alone gives 0. d_k = 1, Q =
 * 1, K = NaN for the keys of the first block (3 keys, or the default
 * 256) and 0.5 after, V = 1; row 1's mask drops every key after them. */
START_TEST(test_attention_online_nan_score_as_softmax)
{
    static const char *impls[] = {"portable", "avx2", "avx512"};
    static const int bks[2] = {3, QKV_ONLINE_BK}, tks[2] = {7, 300};
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(impls[im], NULL) != 0)
            continue;
        for (int n = 0; n < 2; n++) {
            const int tk = tks[n], bk = bks[n];
            qkv_tensor *q = tensor_of(3, (const int[]){1, 2, 1}, (const double[]){1, 1}, 0);
            qkv_tensor *k = tensor_of(3, (const int[]){1, tk, 1}, NULL, 0);
            qkv_tensor *v = tensor_of(3, (const int[]){1, tk, 1}, NULL, 0);
            qkv_tensor *m = tensor_of(2, (const int[]){2, tk}, NULL, 0);
            for (int j = 0; j < tk; j++) {
                k->data[j] = (qkv_real)(j < bk ? NAN : 0.5);
                v->data[j] = 1;
                m->data[tk + j] = (qkv_real)(j < bk ? 0 : -INFINITY);
            }
            qkv_tape *t = qkv_tape_new(0, NULL);
            qkv_attention_online_blocks(2, bk);
            qkv_tensor *o = qkv_attention_online(t, q, k, v, m, 1, 0);
            qkv_attention_online_blocks(QKV_ONLINE_BQ, QKV_ONLINE_BK);
            qkv_tensor *f = qkv_attention(t, q, k, v, m, 1, NULL);
            ck_assert_msg(qkv_tape_status(t) == QKV_OK, "%s", qkv_tape_error(t));
            ck_assert_msg(isnan(f->data[0]) && f->data[1] == 0, "%s: attention gives %g, %g",
                          impls[im], (double)f->data[0], (double)f->data[1]);
            ck_assert_msg(isnan(o->data[0]) && o->data[1] == 0,
                          "%s tk=%d: online O = %g, %g; expected NaN, 0", impls[im], tk,
                          (double)o->data[0], (double)o->data[1]);
            qkv_tape_free(t);
            qkv_tensor_free(q);
            qkv_tensor_free(k);
            qkv_tensor_free(v);
            qkv_tensor_free(m);
        }
    }
    qkv_kernels_use("auto", NULL);
}
END_TEST

/* The online form's O and gradients, for a given thread count. */
static void online_run(int threads, qkv_real *out, size_t n_out)
{
    ck_assert_int_eq(qkv_threads_use(threads, NULL), 0);
    qkv_rng g;
    qkv_rng_seed(&g, 5);
    qkv_tensor *q = random_tensor(&g, 4, (const int[]){4, 3, 40, 16}, 1);
    qkv_tensor *k = random_tensor(&g, 4, (const int[]){4, 3, 40, 16}, 1);
    qkv_tensor *v = random_tensor(&g, 4, (const int[]){4, 3, 40, 16}, 1);
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_attention_online_blocks(16, 16);
    qkv_tensor *o = qkv_attention_online(t, q, k, v, NULL, 0.25, 1);
    qkv_attention_online_blocks(QKV_ONLINE_BQ, QKV_ONLINE_BK);
    ck_assert_int_eq(qkv_backward(t, weighted_sum(t, o, &g)), QKV_OK);
    const size_t n = o->numel;
    ck_assert_uint_eq(4 * n, n_out);
    memcpy(out, o->data, n * sizeof *out);
    memcpy(out + n, q->grad, n * sizeof *out);
    memcpy(out + 2 * n, k->grad, n * sizeof *out);
    memcpy(out + 3 * n, v->grad, n * sizeof *out);
    qkv_tape_free(t);
    qkv_tensor_free(q);
    qkv_tensor_free(k);
    qkv_tensor_free(v);
}

/* 12 items over 1, 2 and 3 threads: the same bits. */
START_TEST(test_attention_online_same_on_any_thread_count)
{
    enum { N = 4 * 4 * 3 * 40 * 16 };
    qkv_real *one = malloc(sizeof *one * N), *more = malloc(sizeof *more * N);
    online_run(1, one, N);
    for (int threads = 2; threads <= 3; threads++) {
        online_run(threads, more, N);
        ck_assert_msg(memcmp(one, more, sizeof *one * N) == 0, "%d threads differ", threads);
    }
    qkv_threads_use(1, NULL);
    free(one);
    free(more);
}
END_TEST

/* Its shape errors name the op. */
START_TEST(test_attention_online_errors_name_the_op)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *q = qkv_tape_tensor(t, 3, (const int[]){2, 4, 8}, 1);
    qkv_tensor *k = qkv_tape_tensor(t, 3, (const int[]){2, 5, 7}, 1);
    qkv_tensor *o = qkv_attention_online(t, q, k, k, NULL, 1, 0);
    ck_assert(qkv_tensor_is_nil(o));
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_SHAPE);
    ck_assert_msg(strstr(qkv_tape_error(t), "attention_online: q [2,4,8], k [2,5,7]") != NULL, "%s",
                  qkv_tape_error(t));
    qkv_tape_free(t);
}
END_TEST

/* Form f of the six attention ops on x [2,3,12] or the table tab [6,12],
 * with parts where the form has them. */
static qkv_tensor *attention_form(qkv_tape *t, int f, qkv_tensor *x, qkv_tensor *tab)
{
    qkv_attention_parts parts;
    const int ids[6] = {0, 1, 2, 3, 4, 5}, query[2] = {0, 2};
    switch (f) {
    case 0: return qkv_attention(t, x, x, x, NULL, 1, &parts);
    case 1: return qkv_attention_online(t, x, x, x, NULL, 1, 1);
    case 2: return qkv_attention_heads(t, x, 2, NULL, 1, &parts);
    case 3: return qkv_attention_heads_online(t, x, 2, NULL, 1, 1);
    case 4: return qkv_embed_attention(t, tab, tab, tab, ids, 2, 3, NULL, 1, &parts);
    default: return qkv_embed_attention_rows(t, tab, tab, tab, ids, 2, 3, NULL, 1, query, &parts);
    }
}

/* Every form names itself when its node cannot be recorded: all six said
 * "attention" (the node they share) for an input another tape made, and
 * "output" when memory ran out for the link to the scores or weights. */
START_TEST(test_attention_forms_name_themselves_recording_their_node)
{
    static const char *const names[] = {"attention",       "attention_online",
                                        "attention_heads", "attention_heads_online",
                                        "embed_attention", "embed_attention_rows"};
    qkv_tape *u = qkv_tape_new(0, NULL);
    qkv_tensor *w = qkv_tensor_new(3, (const int[]){2, 3, 12}, 1, NULL);
    qkv_tensor *x = qkv_scale(u, w, 1); /* its gradient is u's */
    qkv_tensor *tab = qkv_reshape(u, x, 2, (const int[]){6, 12});
    char want[128];
    for (int f = 0; f < 6; f++) {
        qkv_tape *t = qkv_tape_new(0, NULL);
        expect_another_tapes_input(t, attention_form(t, f, x, tab), names[f]);
        qkv_tape_free(t);
    }
    /* out of memory at each point in turn: an arena of n bytes, then the
     * next block refused; the last points are the links to the parts */
    qkv_tensor *tw = qkv_tensor_new(2, (const int[]){6, 12}, 1, NULL);
    for (int f = 0; f < 6; f++) {
        qkv_tape *t = qkv_tape_new(0, NULL);
        ck_assert(!qkv_tensor_is_nil(attention_form(t, f, w, tw)));
        const size_t used = qkv_tape_bytes_used(t);
        qkv_tape_free(t);
        snprintf(want, sizeof want, "%s: out of memory allocating ", names[f]);
        for (size_t n = 64; n <= used; n += 64) {
            t = qkv_tape_new(n, NULL);
            qkv_alloc_fail_at(qkv_alloc_count() + 1);
            qkv_tensor *o = attention_form(t, f, w, tw);
            qkv_alloc_fail_at(0);
            if (qkv_tape_status(t) != QKV_OK) {
                ck_assert(o == qkv_nil());
                ck_assert_msg(strncmp(qkv_tape_error(t), want, strlen(want)) == 0,
                              "arena of %zu bytes: %s", n, qkv_tape_error(t));
            }
            qkv_tape_free(t);
        }
    }
    qkv_tensor_free(w);
    qkv_tensor_free(tw);
    qkv_tape_free(u);
}
END_TEST

Suite *attention_suite(void)
{
    Suite *s = suite_create("attention");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_attention_equals_unfused_ops);
    tcase_add_test(tc, test_embed_attention_equals_gathers_and_attention);
    tcase_add_test(tc, test_embed_attention_rows_equals_picked_rows);
    tcase_add_test(tc, test_embed_attention_rows_keeps_the_sign_of_zero);
    tcase_add_test(tc, test_embed_attention_rows_without_parts_equals_picked_rows);
    tcase_add_test(tc, test_embed_attention_rows_without_parts_makes_no_scores);
    tcase_add_test(tc, test_embed_attention_rows_spread_an_infinite_gradient);
    tcase_add_test(tc, test_embed_attention_rows_without_parts_infinite_key);
    tcase_add_test(tc, test_attention_heads_equals_slices_and_permutes);
    tcase_add_test(tc, test_attention_same_on_any_thread_count);
    tcase_add_test(tc, test_attention_nan_score_as_unfused);
    tcase_add_test(tc, test_attention_takes_a_mask_per_query_row);
    tcase_add_test(tc, test_attention_adds_a_finite_mask_as_it_is);
    tcase_add_test(tc, test_attention_gradients_add_to_other_consumers);
    tcase_add_test(tc, test_attention_skips_zero_rows_of_do_by_an_infinite_value);
    tcase_add_test(tc, test_embed_attention_sees_a_row_live_by_its_last_entry);
    tcase_add_test(tc, test_attention_gradients_flow_from_the_parts_alone);
    tcase_add_test(tc, test_attention_errors_name_the_shapes);
    tcase_add_test(tc, test_attention_refuses_a_scale_not_finite);
    tcase_add_test(tc, test_attention_online_within_its_bound);
    tcase_add_test(tc, test_attention_online_same_on_any_thread_count);
    tcase_add_test(tc, test_attention_online_nan_score_as_softmax);
    tcase_add_test(tc, test_attention_online_errors_name_the_op);
    tcase_add_test(tc, test_attention_forms_name_themselves_recording_their_node);
    suite_add_tcase(s, tc);
    return s;
}
