/*
 * eval.c - `qkv eval`: accuracy, loss and attention on the antecedent of a
 * saved model, per split and per level.
 */
#include <math.h>

#include "cli.h"

int cmd_eval(int argc, char **argv)
{
    const char *path = NULL;
    const cli_opt opts[] = {
        {"model", OPT_FILE, &path, 0, 0, "FILE: checkpoint (default out/coref.safetensors)"},
    };
    int r = cli_parse(argc, argv, opts, 1, "[--model FILE]",
                      "Evaluates a trained model on the train, validation and test splits of\n"
                      "every level it was trained on (the splits are rebuilt from the seed and\n"
                      "the levels stored in the model).",
                      NULL, 0, NULL);
    if (r != CLI_OK)
        return r;
    qkv_coref_model *m = cli_load_model("eval", path);
    if (m == NULL)
        return CLI_FAIL;
    qkv_coref_data d = {0};
    qkv_error err = qkv_error_none();
    qkv_tape *t = qkv_tape_new(0, &err);
    qkv_coref_batch *b = t ? qkv_coref_batch_new(256, QKV_COREF_MAX_TOKENS, &err) : NULL;
    /* the levels it was trained on: the validation split of a part differs
     * from that part of all the levels' split (a checkpoint without them
     * is from before they were recorded, when train took all) */
    const unsigned levels = m->levels != 0 ? m->levels : QKV_COREF_ALL_LEVELS;
    if (b == NULL || qkv_coref_data_build(&d, levels, m->cfg.seed, &err) != QKV_OK) {
        qkv_coref_model_free(m);
        qkv_tape_free(t);
        qkv_coref_batch_free(b);
        return cli_fail_status(err.status, "eval: %s", err.message);
    }
    printf("model: ");
    cli_put_safe(stdout, path ? path : CLI_DEFAULT_MODEL);
    printf("  d_k=%d  %s  init_std=%g  seed=%llu", m->cfg.d_k,
           m->cfg.scaled ? "scaled" : "unscaled", m->cfg.init_std, (unsigned long long)m->cfg.seed);
    for (int l = 1, first = 1; levels != QKV_COREF_ALL_LEVELS && l <= QKV_COREF_LEVELS; l++)
        if (levels & (1u << (l - 1))) {
            printf("%s%d", first ? "  levels=" : ",", l);
            first = 0;
        }
    printf("\n\n");
    printf("%-6s %-6s %6s %9s %9s %16s\n", "split", "level", "items", "accuracy", "loss",
           "attn_antecedent");
    const char *names[3] = {"train", "val", "test"};
    const qkv_coref_example *sets[3] = {d.train, d.val, d.test};
    const int sizes[3] = {d.n_train, d.n_val, d.n_test};
    for (int s = 0; s < 3 && r == CLI_OK; s++)
        for (int level = 1; level <= QKV_COREF_LEVELS + 1; level++) {
            qkv_coref_eval e;
            int lv = level > QKV_COREF_LEVELS ? 0 : level;
            if (lv != 0 && !(levels & (1u << (lv - 1))))
                continue; /* not trained on: no split of it */
            if (qkv_coref_evaluate(m, t, b, sets[s], sizes[s], lv, &e) != QKV_OK) {
                r = cli_fail_status(qkv_tape_status(t), "eval: %s", qkv_tape_error(t));
                break;
            }
            if (!isfinite(e.loss) || !isfinite(e.mass)) { /* weights that overflow Q·Kᵀ */
                r = cli_fail("eval: %s gives non-finite losses or attention (are its weights too "
                             "large?)",
                             path != NULL ? path : CLI_DEFAULT_MODEL);
                break;
            }
            char lvl[8];
            snprintf(lvl, sizeof lvl, lv ? "%d" : "all", lv);
            printf("%-6s %-6s %6d %9.4f %9.4f %16.4f\n", names[s], lvl, e.n, e.acc, e.loss, e.mass);
        }
    qkv_coref_data_free(&d);
    qkv_coref_batch_free(b);
    qkv_tape_free(t);
    qkv_coref_model_free(m);
    return r;
}
