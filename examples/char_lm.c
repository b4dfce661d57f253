/*
 * char_lm.c - a character-level language model: a causal Transformer
 * reads a short Chinese text one character at a time and learns to predict
 * the next one; then it recites the whole text from its first character
 * alone, by greedy decoding, each prediction fed back in as the next input.
 *
 * The text is UTF-8. It is checked with qkv_utf8_valid and cut into
 * characters (Unicode code points) with qkv_utf8_next, one token each;
 * the vocabulary is the distinct characters in the order they first
 * appear. The model is trained on windows of T characters, so while
 * reciting it reads the last T characters it wrote, or all of them while
 * there are fewer. That is enough: the first character appears once, and
 * each run of T characters is followed by one character only (runs of up
 * to 4 are not).
 *
 * It prints the loss, the recited text and whether it is the text, and how
 * many heap allocations the training steps after the first made (0: the
 * tape reuses its memory).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "qkv.h"

static const char TEXT[] = "好朋友：小明是个运动达人，他平时很爱打篮球。"
                           "小红是个音乐达人，她平时很爱弹钢琴。"
                           "周末他们一起去公园，小明打篮球，小红弹钢琴。";

enum {
    MAX_CHARS = 128, /* the text's length in characters, at most */
    T = 16,          /* the context window */
    D = 32,          /* d_model */
    H = 4,           /* heads */
    HIDDEN = 4 * D,  /* FFN width */
    B = 16,          /* windows per step */
    STEPS = 300,
    WARMUP = 20
};

/* One character of the vocabulary: where its bytes first appear in TEXT. */
typedef struct vocab_entry {
    uint32_t code; /* the code point */
    int at, len;   /* its bytes: TEXT[at .. at+len) */
} vocab_entry;

typedef struct model {
    qkv_params *p;
    qkv_embedding tok, pos;
    qkv_block block;
    qkv_norm ln_f;
    qkv_linear head;
} model;

/* TEXT as token ids in ids[0 .. return value), its vocabulary in vocab
 * (*nv entries); -1 after a message if it is not UTF-8 or too long. */
static int tokenize(int *ids, vocab_entry *vocab, int *nv)
{
    size_t bad;
    const size_t bytes = strlen(TEXT);
    if (!qkv_utf8_valid(TEXT, bytes, &bad)) {
        fprintf(stderr, "char_lm: the text is not UTF-8 at byte %zu\n", bad);
        return -1;
    }
    int n = 0;
    *nv = 0;
    for (size_t at = 0; at < bytes; n++) {
        int v = 0;
        uint32_t code;
        const int len = (int)qkv_utf8_next(TEXT + at, bytes - at, &code); /* valid: checked */
        if (n == MAX_CHARS) {
            fprintf(stderr, "char_lm: the text has more than %d characters\n", MAX_CHARS);
            return -1;
        }
        while (v < *nv && vocab[v].code != code)
            v++;
        if (v == *nv)
            vocab[(*nv)++] = (vocab_entry){code, (int)at, len};
        ids[n] = v;
        at += (size_t)len;
    }
    return n;
}

/* The layers, their parameters in a new list (seeded by seed). */
static qkv_status model_init(model *m, int nv, uint64_t seed, qkv_error *err)
{
    memset(m, 0, sizeof *m);
    if ((m->p = qkv_params_new(seed, err)) == NULL)
        return err->status;
    qkv_status s = qkv_embedding_init(&m->tok, m->p, "tok", nv, D, err);
    if (s == QKV_OK)
        s = qkv_positions_init(&m->pos, m->p, "pos", T, D, err);
    if (s == QKV_OK)
        s = qkv_block_init(&m->block, m->p, "block0", D, H, HIDDEN, 1, err); /* causal */
    if (s == QKV_OK)
        s = qkv_norm_init(&m->ln_f, m->p, "ln_f", D, err);
    if (s == QKV_OK)
        s = qkv_linear_init(&m->head, m->p, "head", D, nv, 1, err);
    return s;
}

/* Logits [rows, len, nv] for token ids [rows, len], len <= T. */
static qkv_tensor *forward(qkv_tape *t, const model *m, const int *ids, int rows, int len)
{
    qkv_tensor *x = qkv_embedding_forward(t, &m->tok, ids, 2, (const int[]){rows, len});
    x = qkv_add_positions(t, x, m->pos.weight);
    x = qkv_block_forward(t, &m->block, x, NULL, NULL);
    return qkv_linear_forward(t, &m->head, qkv_norm_forward(t, &m->ln_f, x));
}

/* Writes n characters into out from out[0] on: each the most likely next
 * one after the last T (or fewer) written. Records no gradients. */
static qkv_status recite(qkv_tape *t, const model *m, int nv, int *out, int n)
{
    const int was = qkv_tape_set_grad(t, 0); /* kept across resets */
    for (int k = 1; k < n; k++) {
        const int len = k < T ? k : T;
        qkv_tape_reset(t);
        qkv_tensor *logits = forward(t, m, out + k - len, 1, len);
        if (qkv_tape_status(t) != QKV_OK)
            break;
        const qkv_real *last = logits->data + (size_t)(len - 1) * nv; /* the next one's row */
        int best = 0;
        for (int c = 1; c < nv; c++)
            best = last[c] > last[best] ? c : best;
        out[k] = best;
    }
    qkv_tape_set_grad(t, was);
    return qkv_tape_status(t);
}

int main(int argc, char **argv)
{
    if (argc > 1) { /* it takes none: --help says what it does */
        const int help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0;
        if (!help) {
            char arg[256]; /* escaped: an argument cannot steer the terminal */
            qkv_escape(arg, sizeof arg, argv[1]);
            fprintf(stderr, "char_lm: unexpected argument '%s'\n", arg);
        }
        fprintf(help ? stdout : stderr,
                "usage: char_lm\n"
                "Trains a causal Transformer on a short Chinese text, one character a token,\n"
                "then recites the text from its first character. It takes no arguments.\n");
        return help ? 0 : 2;
    }
    static int text[MAX_CHARS], out[MAX_CHARS], ids[B * T], targets[B * T];
    static vocab_entry vocab[MAX_CHARS];
    int nv;
    const int n = tokenize(text, vocab, &nv);
    if (n < 0)
        return 1;
    printf("%d characters, %d distinct\n", n, nv);

    qkv_error err = qkv_error_none();
    model m;
    qkv_tape *t = NULL;
    qkv_optim *opt = NULL;
    int rc = 1;
    qkv_optim_config oc = qkv_optim_defaults(QKV_ADAMW);
    oc.lr = 3e-3;
    oc.clip = 1.0;
    if (model_init(&m, nv, 1, &err) != QKV_OK || (t = qkv_tape_new(0, &err)) == NULL ||
        (opt = qkv_params_optim(m.p, &oc, &err)) == NULL) {
        fprintf(stderr, "char_lm: %s\n", err.message);
        goto done;
    }

    /* ---- training: each row a window of T characters, each target the
     * character after its input ---- */
    qkv_rng g;
    qkv_rng_seed(&g, 5);
    size_t allocs = 0;
    for (int step = 0; step < STEPS; step++) {
        if (step == 1)
            allocs = qkv_alloc_count();
        for (int r = 0; r < B; r++) {
            const int start = (int)qkv_rng_below(&g, (uint64_t)(n - T));
            for (int i = 0; i < T; i++) {
                ids[r * T + i] = text[start + i];
                targets[r * T + i] = text[start + i + 1];
            }
        }
        qkv_optim_set_lr(opt, qkv_lr_warmup_cosine(step, WARMUP, STEPS, oc.lr, oc.lr / 10));
        qkv_params_zero_grad(m.p);
        qkv_tape_reset(t);
        qkv_tensor *loss = qkv_cross_entropy(t, forward(t, &m, ids, B, T), targets);
        if (qkv_backward(t, loss) != QKV_OK) {
            fprintf(stderr, "char_lm: step %d: %s\n", step, qkv_tape_error(t));
            goto done;
        }
        if (qkv_optim_step(opt) != QKV_OK) {
            fprintf(stderr, "char_lm: step %d: %s\n", step, qkv_optim_error(opt));
            goto done;
        }
        if ((step + 1) % 100 == 0)
            printf("step %3d  loss %.4f\n", step + 1, (double)loss->data[0]);
    }
    allocs = qkv_alloc_count() - allocs;

    /* ---- reciting from the first character ---- */
    out[0] = text[0];
    if (recite(t, &m, nv, out, n) != QKV_OK) {
        fprintf(stderr, "char_lm: %s\n", qkv_tape_error(t));
        goto done;
    }
    int same = 0;
    while (same < n && out[same] == text[same])
        same++;
    printf("recited: ");
    for (int k = 0; k < n; k++)
        printf("%.*s", vocab[out[k]].len, TEXT + vocab[out[k]].at);
    printf("\n%s (%d of %d characters right from the start)\n",
           same == n ? "the text, exactly" : "NOT the text", same, n);
    printf("heap allocations in steps 2 to %d: %zu\n", STEPS, allocs);
    rc = same == n && allocs == 0 ? 0 : 1;
done:
    qkv_optim_free(opt);
    qkv_tape_free(t);
    qkv_params_free(m.p);
    return rc;
}
