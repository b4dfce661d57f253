/*
 * transformer.c - a two-block causal Transformer, built from the library's
 * layers over one parameter list, learns to sort digits.
 *
 * A sequence is N digits, a separator, then the same digits sorted:
 *
 *   3 1 4 1 5 9 2 6 | 1 1 2 3 4 5 6 9
 *
 * The model reads it left to right and, after the separator, predicts each
 * next sorted digit; the loss counts only those positions. Sorting needs
 * every input digit at every output position, so attention must learn to
 * count: how many digits smaller than the last one written, and how many
 * equal ones are still to come.
 *
 * It trains with AdamW (no decay on biases and norm gains), a warm-up then
 * cosine learning rate and gradient clipping; then it sorts fresh
 * sequences by greedy decoding, one digit at a time; saves its weights as
 * safetensors (to argv[1], or else to a temporary file in $TMPDIR or /tmp,
 * removed at the end; either place is checked before the training), loads
 * them into a second model and checks that it sorts exactly as the first.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* mkstemp */
#endif
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qkv.h"

enum {
    N = 8,  /* digits to sort */
    V = 11, /* 0-9 and the separator */
    SEP = 10,
    T = 2 * N,      /* the model sees N digits, SEP and N - 1 sorted ones */
    D = 32,         /* d_model */
    H = 4,          /* heads */
    HIDDEN = 4 * D, /* FFN width */
    BLOCKS = 2,
    B = 32, /* sequences per step */
    STEPS = 800,
    WARMUP = 50,
    TESTS = 512 /* fresh sequences sorted at the end */
};

typedef struct model {
    qkv_params *p;
    qkv_embedding tok, pos;
    qkv_block block[BLOCKS];
    qkv_norm ln_f;
    qkv_linear head;
} model;

/* The layers of a model, their parameters in a new list (seeded by seed). */
static qkv_status model_init(model *m, uint64_t seed, qkv_error *err)
{
    char name[32];
    memset(m, 0, sizeof *m);
    if ((m->p = qkv_params_new(seed, err)) == NULL)
        return err->status;
    qkv_status s = qkv_embedding_init(&m->tok, m->p, "tok", V, D, err);
    if (s == QKV_OK)
        s = qkv_positions_init(&m->pos, m->p, "pos", T, D, err);
    for (int b = 0; b < BLOCKS && s == QKV_OK; b++) {
        snprintf(name, sizeof name, "block%d", b);
        s = qkv_block_init(&m->block[b], m->p, name, D, H, HIDDEN, 1, err);
    }
    if (s == QKV_OK)
        s = qkv_norm_init(&m->ln_f, m->p, "ln_f", D, err);
    if (s == QKV_OK)
        s = qkv_linear_init(&m->head, m->p, "head", D, V, 1, err);
    return s;
}

/* Logits [rows, T, V] for token ids [rows, T]. */
static qkv_tensor *forward(qkv_tape *t, const model *m, const int *ids, int rows)
{
    qkv_tensor *x = qkv_embedding_forward(t, &m->tok, ids, 2, (const int[]){rows, T});
    x = qkv_add_positions(t, x, m->pos.weight);
    for (int b = 0; b < BLOCKS; b++)
        x = qkv_block_forward(t, &m->block[b], x, NULL, NULL);
    return qkv_linear_forward(t, &m->head, qkv_norm_forward(t, &m->ln_f, x));
}

/* A random sequence in ids[0..T) and its targets: at position N - 1 + k
 * (the separator, then each sorted digit written so far) the k-th sorted
 * digit; nothing before. Returns the sorted digits in sorted[0..N). */
static void example(qkv_rng *g, int *ids, int *targets, int *sorted)
{
    int count[10] = {0};
    for (int i = 0; i < N; i++) {
        ids[i] = (int)qkv_rng_below(g, 10);
        count[ids[i]]++;
    }
    for (int d = 0, k = 0; d < 10; d++)
        while (count[d]-- > 0)
            sorted[k++] = d;
    ids[N] = SEP;
    for (int k = 0; k < N - 1; k++)
        ids[N + 1 + k] = sorted[k];
    for (int i = 0; i < T; i++)
        targets[i] = i < N ? QKV_IGNORE : sorted[i - N];
}

/* Sorts rows sequences greedily: ids holds the digits and the separator;
 * each step writes the most likely next digit. out gets [rows, N]. */
static qkv_status decode(qkv_tape *t, const model *m, int *ids, int rows, int *out)
{
    for (int k = 0; k < N; k++) {
        qkv_tape_reset(t);
        qkv_tape_set_grad(t, 0);
        qkv_tensor *logits = forward(t, m, ids, rows);
        if (qkv_tape_status(t) != QKV_OK)
            return qkv_tape_status(t);
        for (int r = 0; r < rows; r++) {
            const qkv_real *l = logits->data + ((size_t)r * T + N + k) * V;
            int best = 0;
            for (int c = 1; c < 10; c++)
                best = l[c] > l[best] ? c : best;
            out[r * N + k] = best;
            if (k < N - 1)
                ids[r * T + N + 1 + k] = best;
        }
    }
    qkv_tape_set_grad(t, 1);
    return QKV_OK;
}

/* Sorts TESTS fresh sequences (from seed) with m into out; returns how
 * many came out exactly sorted, or -1 after printing the error. */
static int sort_fresh(qkv_tape *t, const model *m, uint64_t seed, int *out)
{
    static int ids[TESTS * T], targets[T], sorted[TESTS * N];
    qkv_rng g;
    qkv_rng_seed(&g, seed);
    for (int r = 0; r < TESTS; r++) {
        example(&g, ids + r * T, targets, sorted + r * N);
        for (int k = N + 1; k < T; k++) /* the answer is not given */
            ids[r * T + k] = SEP;
    }
    int right = 0;
    for (int r = 0; r < TESTS; r += B) {
        if (decode(t, m, ids + r * T, B, out + r * N) != QKV_OK) {
            fprintf(stderr, "transformer: %s\n", qkv_tape_error(t));
            return -1;
        }
    }
    for (int r = 0; r < TESTS; r++)
        right += memcmp(out + r * N, sorted + r * N, sizeof(int) * N) == 0;
    return right;
}

/* Prints s, a name the user gave, to f as a message shows it: control
 * characters, invalid UTF-8 and characters that steer the terminal
 * escaped (qkv_escape); other UTF-8 (Chinese) as it is. */
static void put_safe(FILE *f, const char *s)
{
    char buf[1024];
    qkv_escape(buf, sizeof buf, s);
    fputs(buf, f);
}

/* "transformer: cannot save to WHAT: why" on stderr, WHAT escaped. */
static void cannot_save(const char *what, const char *why)
{
    fprintf(stderr, "transformer: cannot save to ");
    put_safe(stderr, what);
    fprintf(stderr, ": %s\n", why);
}

/* 0 if the save could make its temporary file for a file called name in
 * prefix (a directory and its slash, or "" for the working directory):
 * prefix.name.XXXXXX, the name qkv_safetensors_save gives it, so that a
 * name too long for that fails now too; a probe file, made and removed.
 * Else -1, after "cannot save to WHAT: why". */
static int can_create(const char *prefix, const char *name, const char *what)
{
    char probe[4096];
    const int n = snprintf(probe, sizeof probe, "%s.%s.XXXXXX", prefix, name);
    int fd = -1;
    errno = ENAMETOOLONG;
    if (n > 0 && (size_t)n < sizeof probe)
        fd = mkstemp(probe);
    if (fd < 0) {
        cannot_save(what, strerror(errno));
        return -1;
    }
    close(fd);
    unlink(probe);
    return 0;
}

/* 0 if the weights can be saved to path; else, after one line saying
 * why, 2 for a name wrong as written (empty, or a directory by its
 * spelling: "d/", ".", "d/..") and 1 for a path the file system refuses,
 * as qkv train --save does. Checked before the training, not after it:
 * a directory or anything else but a regular file at path (the save
 * replaces a regular file only), or a directory that takes no new file
 * (the save writes a temporary file beside path, then renames it). */
static int can_save_to(const char *path)
{
    if (*path == '\0') {
        fprintf(stderr, "transformer: WEIGHTS is empty; name a file\n");
        return 2;
    }
    const char *slash = strrchr(path, '/'), *base = slash != NULL ? slash + 1 : path;
    if (*base == '\0' || strcmp(base, ".") == 0 || strcmp(base, "..") == 0) {
        fprintf(stderr, "transformer: WEIGHTS '");
        put_safe(stderr, path);
        fprintf(stderr, "' names a directory, not a file\n");
        return 2;
    }
    struct stat sb;
    if (lstat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        cannot_save(path, S_ISDIR(sb.st_mode) ? "it is a directory" : "it is not a regular file");
        return 1;
    }
    char prefix[4096]; /* path's directory, with its slash */
    const int n = snprintf(prefix, sizeof prefix, "%.*s", (int)(base - path), path);
    if (n < 0 || (size_t)n >= sizeof prefix) {
        cannot_save(path, strerror(ENAMETOOLONG));
        return 1;
    }
    return can_create(prefix, base, path) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc > 2 || (argc == 2 && argv[1][0] == '-')) { /* --help, or anything unknown */
        /* --help first is help whatever follows, as in the other examples */
        const int help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0;
        if (!help && argc > 2) {
            fprintf(stderr, "transformer: one WEIGHTS file at most, not %d arguments\n", argc - 1);
        } else if (!help && strcmp(argv[1], "-") == 0) {
            fprintf(stderr, "transformer: '-' is not standard output here; write ./- for a file "
                            "named '-'\n");
        } else if (!help) {
            fprintf(stderr, "transformer: unknown option '");
            put_safe(stderr, argv[1]);
            fprintf(stderr, "'\n");
        }
        fprintf(help ? stdout : stderr,
                "usage: transformer [WEIGHTS]\n"
                "Trains a two-block causal Transformer to sort %d digits, saves its weights\n"
                "to WEIGHTS (default: a temporary file, removed at the end, in $TMPDIR or\n"
                "/tmp), reloads them into a second model and checks that it sorts exactly\n"
                "as the first. Give a WEIGHTS whose name starts with '-' as ./-NAME.\n",
                N);
        return help ? 0 : 2;
    }
    /* without WEIGHTS, a new temporary file: nothing is left behind where
     * the example was run */
    const char *path = argc > 1 ? argv[1] : NULL;
    const char *tmpdir = getenv("TMPDIR");
    tmpdir = tmpdir != NULL && *tmpdir != '\0' ? tmpdir : "/tmp";
    /* where the weights go can take them: checked now, not after 800
     * steps (exit 2 for a WEIGHTS wrong as written, 1 for one the file
     * system refuses) */
    const int bad = path != NULL ? can_save_to(path) : 0;
    if (bad != 0)
        return bad;
    if (path == NULL) {
        char prefix[4096], where[4096 + 32];
        snprintf(prefix, sizeof prefix, "%s/", tmpdir);
        snprintf(where, sizeof where, "a temporary file in %s", tmpdir);
        /* the weights' file there is transformer.XXXXXX */
        if (can_create(prefix, "transformer.XXXXXX", where) != 0)
            return 1;
    }
    char temp[4096] = "";
    qkv_error err = qkv_error_none();
    model m, m2 = {0};
    qkv_tape *t = NULL;
    qkv_optim *opt = NULL;
    int rc = 1;
    if (model_init(&m, 1, &err) != QKV_OK || (t = qkv_tape_new(0, &err)) == NULL) {
        fprintf(stderr, "transformer: %s\n", err.message);
        goto done;
    }
    printf("%d parameters in %d tensors\n", (int)qkv_params_numel(m.p), qkv_params_count(m.p));

    /* ---- training: AdamW over the whole list ---- */
    qkv_optim_config oc = qkv_optim_defaults(QKV_ADAMW);
    oc.lr = 3e-3;
    oc.weight_decay = 0.01;
    oc.clip = 1.0;
    if ((opt = qkv_params_optim(m.p, &oc, &err)) == NULL) {
        fprintf(stderr, "transformer: %s\n", err.message);
        goto done;
    }
    static int ids[B * T], targets[B * T];
    int sorted[N];
    qkv_rng g;
    qkv_rng_seed(&g, 2);
    size_t allocs = 0;
    for (int step = 0; step < STEPS; step++) {
        if (step == 1)
            allocs = qkv_alloc_count();
        for (int r = 0; r < B; r++)
            example(&g, ids + r * T, targets + r * T, sorted);
        qkv_optim_set_lr(opt, qkv_lr_warmup_cosine(step, WARMUP, STEPS, oc.lr, oc.lr / 10));
        qkv_params_zero_grad(m.p);
        qkv_tape_reset(t);
        qkv_tensor *loss = qkv_cross_entropy(t, forward(t, &m, ids, B), targets);
        if (qkv_backward(t, loss) != QKV_OK || qkv_optim_step(opt) != QKV_OK) {
            /* the tape's reason, else the optimizer's (a gradient or update not finite) */
            fprintf(stderr, "transformer: step %d: %s\n", step,
                    qkv_tape_status(t) != QKV_OK ? qkv_tape_error(t) : qkv_optim_error(opt));
            goto done;
        }
        if ((step + 1) % 200 == 0)
            printf("step %4d  loss %.4f  lr %.5f\n", step + 1, (double)loss->data[0],
                   qkv_optim_lr(opt));
    }
    allocs = qkv_alloc_count() - allocs;

    /* ---- sorting fresh sequences, saving, reloading ---- */
    static int out[TESTS * N], out2[TESTS * N];
    int right = sort_fresh(t, &m, 99, out);
    if (right < 0)
        goto done;
    printf("sorted exactly: %d of %d fresh sequences (%.1f%%)\n", right, TESTS,
           100.0 * right / TESTS);
    if (path == NULL) {
        snprintf(temp, sizeof temp, "%s/transformer.XXXXXX", tmpdir);
        const int fd = mkstemp(temp);
        if (fd < 0) {
            fprintf(stderr, "transformer: cannot create ");
            put_safe(stderr, temp);
            fprintf(stderr, ": %s\n", strerror(errno));
            temp[0] = '\0';
            goto done;
        }
        close(fd);
        path = temp;
    }
    const qkv_meta_entry meta[2] = {{"task", "sort 8 digits"}, {"blocks", "2"}};
    if (qkv_safetensors_save(m.p, path, meta, 2, &err) != QKV_OK ||
        model_init(&m2, 12345, &err) != QKV_OK || /* other random weights */
        qkv_safetensors_load(m2.p, path, &err) != QKV_OK) {
        fprintf(stderr, "transformer: %s\n", err.message);
        goto done;
    }
    int right2 = sort_fresh(t, &m2, 99, out2);
    int same = right2 == right && memcmp(out, out2, sizeof out) == 0;
    printf("reloaded from ");
    put_safe(stdout, path);
    printf(": %s predictions\n", same ? "the same" : "DIFFERENT");
    printf("heap allocations in steps 2 to %d: %zu\n", STEPS, allocs);
    rc = right >= TESTS * 9 / 10 && same && allocs == 0 ? 0 : 1;
done:
    if (temp[0] != '\0')
        remove(temp);
    qkv_optim_free(opt);
    qkv_tape_free(t);
    qkv_params_free(m.p);
    qkv_params_free(m2.p);
    return rc;
}
