/*
 * demo.c - `qkv demo`: the tutorial's pure-Python self-attention demo, run
 * with qkv's own tensors and ops.
 *
 * The weights come from qkv's CPython-compatible RNG, drawn in the order the
 * Python program draws them (Wq, Wk, Wv, each row by row), so the default
 * settings print the same numbers as the tutorial's program. With H heads
 * it prints the multi-head forward pass of scripts/mha_demo.py.
 */
#include <math.h>
#include <stdlib.h>

#include "cli.h"

#define RULE "=================================================="

/* Prints a row the way Python prints [f'{v:.4f}' for v in row]. */
static void print_row(FILE *out, const qkv_real *row, int n)
{
    fputc('[', out);
    for (int j = 0; j < n; j++)
        fprintf(out, "%s'%.4f'", j ? ", " : "", (double)row[j]);
    fputc(']', out);
}

static void print_matrix(FILE *out, const char *title, const qkv_tensor *m)
{
    int rows = m->shape[0], cols = m->shape[1];
    fprintf(out, "\n%s\n", title);
    for (int i = 0; i < rows; i++) {
        fprintf(out, "  第 %d 行: ", i);
        print_row(out, m->data + (size_t)i * cols, cols);
        fputc('\n', out);
    }
}

static qkv_tensor *normal_weights(qkv_rng *g, int rows, int cols)
{
    qkv_tensor *w = qkv_tensor_new(2, (const int[]){rows, cols}, 0, NULL);
    for (size_t i = 0; i < w->numel; i++)
        w->data[i] = (qkv_real)qkv_rng_normalvariate(g, 0, 0.1);
    return w;
}

/* One head's attention on its columns [lo, lo + width) of q, k and v:
 * prints its scores, scaled scores and weights, and returns its output. */
static qkv_tensor *one_head(FILE *out, qkv_tape *t, qkv_tensor *q, qkv_tensor *k, qkv_tensor *v,
                            int lo, int width, int scaled)
{
    if (width != q->shape[1]) { /* a head of several: its own columns */
        q = qkv_slice(t, q, 1, lo, width);
        k = qkv_slice(t, k, 1, lo, width);
        v = qkv_slice(t, v, 1, lo, width);
    }
    qkv_tensor *scores = qkv_matmul_nt(t, q, k);
    qkv_tensor *used = scaled ? qkv_scale(t, scores, 1.0 / sqrt((double)width)) : scores;
    qkv_tensor *attn = qkv_softmax(t, used);
    qkv_tensor *o = qkv_matmul(t, attn, v);
    if (qkv_tape_status(t) != QKV_OK)
        return qkv_nil();
    print_matrix(out, "原始注意力分数:", scores);
    if (scaled)
        print_matrix(out, "缩放后的注意力分数:", used);
    else
        fprintf(out, "\n未缩放（--no-scale）: 原始分数直接进入 Softmax\n");
    print_matrix(out, "注意力权重（Softmax 后）:", attn);
    return o;
}

int demo_print(FILE *out, const demo_config *c)
{
    const int d_model = c->d_model, d_k = c->d_k, seq_len = c->seq_len, heads = c->heads;
    const int width = d_k / heads;
    qkv_rng g;
    qkv_rng_seed(&g, c->seed);
    qkv_tensor *wq = normal_weights(&g, d_model, d_k);
    qkv_tensor *wk = normal_weights(&g, d_model, d_k);
    qkv_tensor *wv = normal_weights(&g, d_model, d_k);
    qkv_tensor *wo = heads > 1 ? normal_weights(&g, d_k, d_k) : NULL; /* one head: none */
    qkv_tensor *x = qkv_tensor_new(2, (const int[]){seq_len, d_model}, 0, NULL);
    qkv_tape *t = qkv_tape_new(0, NULL);
    int rc = CLI_FAIL;
    if (t == NULL || qkv_tensor_is_nil(wq) || qkv_tensor_is_nil(wk) || qkv_tensor_is_nil(wv) ||
        (heads > 1 && qkv_tensor_is_nil(wo)) || qkv_tensor_is_nil(x)) {
        cli_fail_status(QKV_ERR_NOMEM, "demo: out of memory");
        goto done;
    }
    for (int i = 0; i < seq_len; i++) /* word i is the one-hot vector e_i */
        x->data[(size_t)i * d_model + i] = 1;
    qkv_tape_set_grad(t, 0);

    fprintf(out, RULE "\n%s\n" RULE "\n",
            heads == 1 ? "Runoob 自注意力演示" : "Runoob 多头注意力演示");
    fprintf(out, "输入序列长度: %d\n输入维度: %d\n", seq_len, d_model);
    if (heads > 1)
        fprintf(out, "头数: %d，每个头的维度: %d / %d = %d\n", heads, d_k, heads, width);
    fputc('\n', out);

    qkv_tensor *q = qkv_matmul(t, x, wq), *k = qkv_matmul(t, x, wk), *v = qkv_matmul(t, x, wv);
    if (qkv_tape_status(t) != QKV_OK) {
        cli_fail_status(qkv_tape_status(t), "demo: %s", qkv_tape_error(t));
        goto done;
    }
    fprintf(out, "Q 的形状: %d × %d\n", q->shape[0], q->shape[1]);
    fprintf(out, "K 的形状: %d × %d\n", k->shape[0], k->shape[1]);
    fprintf(out, "V 的形状: %d × %d\n", v->shape[0], v->shape[1]);
    qkv_tensor *outs[QKV_DEMO_MAX_HEADS];
    for (int h = 0; h < heads; h++) {
        if (heads > 1)
            fprintf(out, "\n---------- 第 %d 个头（Q、K、V 的第 %d 到 %d 列）----------\n", h,
                    h * width, (h + 1) * width - 1);
        outs[h] = one_head(out, t, q, k, v, h * width, width, c->scaled);
        if (qkv_tensor_is_nil(outs[h])) {
            cli_fail_status(qkv_tape_status(t), "demo: %s", qkv_tape_error(t));
            goto done;
        }
        if (heads > 1) {
            char title[96];
            snprintf(title, sizeof title, "第 %d 个头的输出（%d × %d）:", h, seq_len, width);
            print_matrix(out, title, outs[h]);
        }
    }
    qkv_tensor *output = outs[0];
    if (heads > 1) { /* the heads side by side, then the output projection */
        qkv_tensor *concat = qkv_concat(t, heads, outs, 1);
        output = qkv_matmul(t, concat, wo);
        if (qkv_tape_status(t) != QKV_OK) {
            cli_fail_status(qkv_tape_status(t), "demo: %s", qkv_tape_error(t));
            goto done;
        }
        char title[96];
        snprintf(title, sizeof title, "拼接 %d 个头的输出（%d × %d）:", heads, seq_len, d_k);
        fprintf(out, "\n--------------------------------------------------\n");
        print_matrix(out, title, concat);
        fprintf(out, "\n输出投影 Wo 的形状: %d × %d\n", d_k, d_k);
    }
    fprintf(out, "\n" RULE "\n%s\n" RULE "\n", heads == 1 ? "自注意力输出:" : "多头注意力输出:");
    for (int i = 0; i < seq_len; i++) {
        fprintf(out, "词 %d 的输出: ", i);
        print_row(out, output->data + (size_t)i * d_k, d_k);
        fputc('\n', out);
    }
    rc = CLI_OK;
done:
    qkv_tape_free(t);
    qkv_tensor_free(x);
    qkv_tensor_free(wq);
    qkv_tensor_free(wk);
    qkv_tensor_free(wv);
    qkv_tensor_free(wo);
    return rc;
}

int cmd_demo(int argc, char **argv)
{
    int d_model = 8, d_k = 6, seq_len = 4, heads = 1, no_scale = 0;
    uint64_t seed = 42;
    const cli_opt opts[] = {
        {"d-model", OPT_INT, &d_model, 1, 4096, "N: input (one-hot) dimension (default 8)"},
        {"d-k", OPT_INT, &d_k, 1, 4096, "N: width of Q, K and V (default 6)"},
        {"seq-len", OPT_INT, &seq_len, 1, 4096, "N: number of words, at most d-model (default 4)"},
        {"heads", OPT_INT, &heads, 1, QKV_DEMO_MAX_HEADS,
         "H: attention heads, each of width d-k/H (default 1, the tutorial's)"},
        {"seed", OPT_U64, &seed, 0, 0, "N: random.seed() value (default 42)"},
        {"no-scale", OPT_FLAG, &no_scale, 0, 0, "skip the division by sqrt(d_k)"},
    };
    int r = cli_parse(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]), "[options]",
                      "Runs the tutorial's self-attention forward pass with random weights\n"
                      "N(0, 0.1) drawn exactly as CPython's random module draws them, and prints\n"
                      "Q/K/V shapes, raw and scaled scores, attention weights and the output.\n"
                      "With the defaults the numbers equal the tutorial's Python program's.\n"
                      "With --heads H > 1, the columns of Q, K and V are split into H heads\n"
                      "that attend separately; their outputs are concatenated and projected\n"
                      "by Wo (d-k x d-k, drawn after Wv), as scripts/mha_demo.py does.",
                      NULL, 0, NULL);
    if (r != CLI_OK)
        return r;
    if (seq_len > d_model)
        return cli_usage_error("demo",
                               "--seq-len %d exceeds --d-model %d: each word is a one-hot "
                               "row of width d-model",
                               seq_len, d_model);
    if (d_k % heads != 0)
        return cli_usage_error("demo",
                               "--d-k %d is not a multiple of --heads %d: each head "
                               "takes d-k/heads columns",
                               d_k, heads);
    const demo_config c = {d_model, d_k, seq_len, heads, seed, !no_scale};
    return demo_print(stdout, &c);
}
