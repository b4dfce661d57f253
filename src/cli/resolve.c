/*
 * resolve.c - `qkv resolve "句子"`: tokenize a sentence, show each pronoun's
 * attention over the tokens as a bar chart, and name its antecedent.
 */
#include <math.h>
#include <string.h>

#include "cli.h"

#define BAR 24

static void print_bar(double w)
{
    int n = w > 0 ? (int)(fmin(w, 1) * BAR + 0.5) : 0; /* NaN: no bar, and no UB */
    for (int i = 0; i < n; i++)
        fputs("█", stdout);
    for (int i = n; i < BAR; i++)
        fputs("·", stdout);
}

/* Writes the (T,T) attention matrix of item 0 as CSV with token labels:
 * a header row of key tokens, then one row per query token. */
static int write_matrix(const char *path, const qkv_coref_out *f, const int *ids, int n)
{
    char header[QKV_COREF_MAX_TOKENS * 16 + 16] = "query\\key";
    qkv_error err = qkv_error_none();
    size_t used = strlen(header);
    for (int j = 0; j < n; j++)
        used +=
            (size_t)snprintf(header + used, sizeof header - used, ",%s", qkv_coref_word(ids[j]));
    FILE *out = cli_csv_create(path, header, &err);
    if (out == NULL)
        return cli_fail_status(err.status, "resolve: %s", err.message);
    for (int i = 0; i < n; i++) {
        cli_csv_printf(out, "%s", qkv_coref_word(ids[i]));
        for (int j = 0; j < n; j++)
            cli_csv_printf(out, ",%.6f", (double)f->attn->data[(size_t)i * n + j]);
        cli_csv_printf(out, "\n");
    }
    if (cli_csv_close(out, path) != 0)
        return cli_fail("resolve: cannot write %s: %s", path, cli_csv_error());
    return CLI_OK;
}

/* NULL if every attention weight and logit of f is finite, else which of
 * them is not: weights large enough to overflow Q·Kᵀ, or H·Wo, load (they
 * are finite) but give NaN or inf here. */
static const char *non_finite_part(const qkv_coref_out *f)
{
    for (size_t i = 0; i < f->attn->numel; i++)
        if (!isfinite(f->attn->data[i]))
            return "attention weights";
    for (size_t i = 0; i < f->logits->numel; i++)
        if (!isfinite(f->logits->data[i]))
            return "scores for the names";
    return NULL;
}

static void explain(const qkv_coref_out *f, const qkv_coref_batch *b, int item, const int *ids,
                    int n)
{
    int p = b->query[item];
    const qkv_real *a = f->attn->data + ((size_t)item * b->T + p) * b->T;
    printf("\n%s (token %d) attends to:\n", qkv_coref_word(ids[p]), p);
    for (int j = 0; j < n; j++) {
        printf("  %2d ", j);
        cli_print_padded(stdout, qkv_coref_word(ids[j]), 10);
        print_bar(a[j]);
        printf(" %.3f\n", (double)a[j]);
    }
    double prob;
    int cls = qkv_coref_predict(f, item, &prob), name = qkv_coref_name_id(cls), present = 0;
    for (int j = 0; j < n; j++)
        present |= ids[j] == name;
    printf("%s → %s (%.2f)%s\n", qkv_coref_word(ids[p]), qkv_coref_word(name), prob,
           present ? "" : "  (not in the sentence: a guess)");
}

/* Appends s to buf (of size cap) at *used, as much as fits. */
static void append(char *buf, size_t cap, size_t *used, const char *s)
{
    int k = snprintf(buf + *used, cap - *used, "%s", s);
    if (k > 0)
        *used = *used + (size_t)k < cap ? *used + (size_t)k : cap - 1;
}

/* Appends the words of one kind to a help line that is at column *col,
 * wrapped at 79 columns under column 13. */
static void append_words(char *buf, size_t cap, size_t *used, qkv_coref_word_kind kind, int *col)
{
    for (int i = 1, first = 1; i < qkv_coref_vocab_size(); i++) {
        if (qkv_coref_kind(i) != kind)
            continue;
        const int w = cli_text_width(qkv_coref_word(i));
        if (!first && *col + 1 + w > 79) {
            append(buf, cap, used, "\n             ");
            *col = 13;
        } else if (!first) {
            append(buf, cap, used, " ");
            ++*col;
        }
        append(buf, cap, used, qkv_coref_word(i));
        *col += w;
        first = 0;
    }
}

/* The help's text: what resolve does, and the words it knows, since a
 * sentence of any other word is refused. */
static const char *about(void)
{
    static char buf[2048];
    size_t used = 0;
    append(buf, sizeof buf, &used,
           "Shows where each pronoun (他, 她) in the sentence looks, and which\n"
           "person the model says it refers to. After --, the next argument is\n"
           "the sentence even if it starts with '-'.\n\n");
    char head[64];
    snprintf(head, sizeof head, "Words the model knows (%d):\n  names      ",
             qkv_coref_vocab_size() - 1);
    append(buf, sizeof buf, &used, head);
    int col = 13;
    append_words(buf, sizeof buf, &used, QKV_COREF_MALE, &col);
    append(buf, sizeof buf, &used, " (他)\n             ");
    col = 13;
    append_words(buf, sizeof buf, &used, QKV_COREF_FEMALE, &col);
    append(buf, sizeof buf, &used, " (她)\n  pronouns   他 她\n  others     ");
    col = 13;
    append_words(buf, sizeof buf, &used, QKV_COREF_OTHER, &col);
    return buf;
}

int cmd_resolve(int argc, char **argv)
{
    const char *path = NULL, *csv = NULL;
    char *text[1];
    int npos = 0;
    const cli_opt opts[] = {
        {"model", OPT_FILE, &path, 0, 0, "FILE: checkpoint (default out/coref.safetensors)"},
        {"csv", OPT_FILE, &csv, 0, 0, "FILE: also write the attention matrix as CSV"},
    };
    int r = cli_parse(argc, argv, opts, 2, "[--model FILE] [--csv FILE] [--] \"句子\"", about(),
                      text, 1, &npos);
    if (r != CLI_OK)
        return r;
    if (npos != 1)
        return cli_usage_error("resolve",
                               "give one sentence, e.g. \"小明是个运动达人，他平时很爱打篮球\"");
    if (csv != NULL && cli_same_file(csv, path != NULL ? path : CLI_DEFAULT_MODEL)) {
        cli_fail("resolve: --csv would overwrite the model, %s: give another file", csv);
        return CLI_USAGE;
    }
    qkv_error err = qkv_error_none();
    int ids[QKV_COREF_MAX_TOKENS], n, pronouns[QKV_COREF_MAX_TOKENS], np = 0;
    qkv_status s = qkv_coref_tokenize(text[0], ids, QKV_COREF_MAX_TOKENS, &n, &err);
    if (s == QKV_ERR_FORMAT && strncmp(err.message, "unknown word", 12) == 0) {
        /* point at the list of words, inside the message's parentheses
         * if it has them */
        size_t len = strlen(err.message);
        const int paren = len > 0 && err.message[len - 1] == ')';
        return cli_fail("resolve: %.*s%s'qkv resolve --help' lists the %d words the model knows)",
                        (int)(len - (size_t)paren), err.message, paren ? "; " : " (",
                        qkv_coref_vocab_size() - 1);
    }
    if (s == QKV_ERR_FORMAT && strncmp(err.message, "invalid UTF-8", 13) == 0)
        return cli_fail("resolve: the sentence has %s", err.message); /* "…at byte N" */
    if (s != QKV_OK)
        return cli_fail_status(err.status, "resolve: %s", err.message);
    if (n == 0) /* nothing but spaces, or nothing at all: no sentence was given */
        return cli_usage_error(
            "resolve",
            "the sentence is empty%s: give one, e.g. \"小明是个运动达人，他平时很爱打篮球\"",
            text[0][0] != '\0' ? " (only spaces)" : "");
    for (int i = 0; i < n; i++)
        if (qkv_coref_kind(ids[i]) == QKV_COREF_HE || qkv_coref_kind(ids[i]) == QKV_COREF_SHE)
            pronouns[np++] = i;
    if (np == 0)
        return cli_fail("resolve: no pronoun (他 or 她) in the sentence");
    /* the CSV is written last: one that cannot be fails now, not after
     * the answer is printed; but after the sentence's usage error, an
     * empty one, which exits 2 whatever the files */
    if (csv != NULL && cli_csv_check(csv, &err) != QKV_OK)
        return cli_fail_status(err.status, "resolve: %s", err.message);
    qkv_coref_model *m = cli_load_model("resolve", path);
    if (m == NULL)
        return CLI_FAIL;
    qkv_tape *t = qkv_tape_new(0, &err);
    qkv_coref_batch *b = t ? qkv_coref_batch_new(np, QKV_COREF_MAX_TOKENS, &err) : NULL;
    qkv_coref_out f;
    if (b == NULL) {
        r = cli_fail_status(err.status, "resolve: %s", err.message);
        goto done;
    }
    for (int i = 0; i < np; i++)
        qkv_coref_batch_add(b, ids, n, pronouns[i], QKV_IGNORE, -1);
    qkv_tape_set_grad(t, 0);
    if (qkv_coref_forward(m, t, b, &f) != QKV_OK) {
        r = cli_fail_status(qkv_tape_status(t), "resolve: %s", qkv_tape_error(t));
        goto done;
    }
    const char *bad = non_finite_part(&f);
    if (bad != NULL) {
        r = cli_fail("resolve: %s gives non-finite %s for this sentence (are its weights too "
                     "large?)",
                     path != NULL ? path : CLI_DEFAULT_MODEL, bad);
        goto done;
    }
    printf("tokens:");
    for (int i = 0; i < n; i++)
        printf(" %s", qkv_coref_word(ids[i]));
    printf("\n");
    for (int i = 0; i < np; i++)
        explain(&f, b, i, ids, n);
    if (csv != NULL)
        r = write_matrix(csv, &f, ids, n);
done:
    qkv_coref_batch_free(b);
    qkv_tape_free(t);
    qkv_coref_model_free(m);
    return r;
}
