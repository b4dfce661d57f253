/*
 * demo.c - `qkv demo`: the tutorial's pure-Python self-attention demo, run
 * with qkv's own tensors and ops.
 *
 * The weights come from qkv's CPython-compatible RNG, drawn in the order the
 * Python program draws them (Wq, Wk, Wv, each row by row), so the default
 * settings print the same numbers as the tutorial's program.
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

int demo_print(FILE *out, int d_model, int d_k, int seq_len, uint64_t seed, int scaled)
{
    qkv_rng g;
    qkv_rng_seed(&g, seed);
    qkv_tensor *wq = normal_weights(&g, d_model, d_k);
    qkv_tensor *wk = normal_weights(&g, d_model, d_k);
    qkv_tensor *wv = normal_weights(&g, d_model, d_k);
    qkv_tensor *x = qkv_tensor_new(2, (const int[]){seq_len, d_model}, 0, NULL);
    qkv_tape *t = qkv_tape_new(0, NULL);
    int rc = CLI_FAIL;
    if (t == NULL || qkv_tensor_is_nil(wq) || qkv_tensor_is_nil(wk) || qkv_tensor_is_nil(wv) ||
        qkv_tensor_is_nil(x)) {
        cli_fail("demo: out of memory");
        goto done;
    }
    for (int i = 0; i < seq_len; i++) /* word i is the one-hot vector e_i */
        x->data[(size_t)i * d_model + i] = 1;
    qkv_tape_set_grad(t, 0);

    fprintf(out, RULE "\nRunoob 自注意力演示\n" RULE "\n");
    fprintf(out, "输入序列长度: %d\n输入维度: %d\n\n", seq_len, d_model);

    qkv_tensor *q = qkv_matmul(t, x, wq), *k = qkv_matmul(t, x, wk), *v = qkv_matmul(t, x, wv);
    qkv_tensor *scores = qkv_matmul_nt(t, q, k);
    qkv_tensor *used = scaled ? qkv_scale(t, scores, 1.0 / sqrt((double)d_k)) : scores;
    qkv_tensor *attn = qkv_softmax(t, used);
    qkv_tensor *output = qkv_matmul(t, attn, v);
    if (qkv_tape_status(t) != QKV_OK) {
        cli_fail("demo: %s", qkv_tape_error(t));
        goto done;
    }
    fprintf(out, "Q 的形状: %d × %d\n", q->shape[0], q->shape[1]);
    fprintf(out, "K 的形状: %d × %d\n", k->shape[0], k->shape[1]);
    fprintf(out, "V 的形状: %d × %d\n", v->shape[0], v->shape[1]);
    print_matrix(out, "原始注意力分数:", scores);
    if (scaled)
        print_matrix(out, "缩放后的注意力分数:", used);
    else
        fprintf(out, "\n未缩放（--no-scale）: 原始分数直接进入 Softmax\n");
    print_matrix(out, "注意力权重（Softmax 后）:", attn);
    fprintf(out, "\n" RULE "\n自注意力输出:\n" RULE "\n");
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
    return rc;
}

int cmd_demo(int argc, char **argv)
{
    int d_model = 8, d_k = 6, seq_len = 4, no_scale = 0;
    uint64_t seed = 42;
    const cli_opt opts[] = {
        {"d-model", OPT_INT, &d_model, 1, 4096, "N: input (one-hot) dimension (default 8)"},
        {"d-k", OPT_INT, &d_k, 1, 4096, "N: width of Q, K and V (default 6)"},
        {"seq-len", OPT_INT, &seq_len, 1, 4096, "N: number of words, at most d-model (default 4)"},
        {"seed", OPT_U64, &seed, 0, 0, "N: random.seed() value (default 42)"},
        {"no-scale", OPT_FLAG, &no_scale, 0, 0, "skip the division by sqrt(d_k)"},
    };
    int r = cli_parse(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]), "[options]",
                      "Runs the tutorial's self-attention forward pass with random weights\n"
                      "N(0, 0.1) drawn exactly as CPython's random module draws them, and prints\n"
                      "Q/K/V shapes, raw and scaled scores, attention weights and the output.\n"
                      "With the defaults the numbers equal the tutorial's Python program's.",
                      NULL, 0, NULL);
    if (r != CLI_OK)
        return r;
    if (seq_len > d_model)
        return cli_usage_error("demo",
                               "--seq-len %d exceeds --d-model %d: each word is a one-hot "
                               "row of width d-model",
                               seq_len, d_model);
    return demo_print(stdout, d_model, d_k, seq_len, seed, !no_scale);
}
