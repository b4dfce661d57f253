/*
 * eval.c - `qkv eval`: accuracy, loss and attention on the antecedent of a
 * saved model, per split and per level.
 */
#include "cli.h"

int cmd_eval(int argc, char **argv)
{
    const char *path = NULL;
    const cli_opt opts[] = {
        {"model", OPT_STR, &path, 0, 0, "FILE: checkpoint (default out/coref.qkv)"},
    };
    int r = cli_parse(argc, argv, opts, 1, "[--model FILE]",
                      "Evaluates a trained model on the train, validation and test splits of\n"
                      "every level (the splits are rebuilt from the seed stored in the model).",
                      NULL, 0, NULL);
    if (r != CLI_OK)
        return r;
    qkv_model *m = task_load(path);
    if (m == NULL)
        return CLI_FAIL;
    qkv_dataset d;
    qkv_tape *t = qkv_tape_new(0);
    qkv_batch *b = qkv_batch_new(256, QKV_MAX_TOKENS);
    if (t == NULL || b == NULL || qkv_dataset_build(&d, QKV_ALL_LEVELS, m->cfg.seed) != QKV_OK) {
        qkv_model_free(m);
        qkv_tape_free(t);
        qkv_batch_free(b);
        return cli_fail("eval: out of memory");
    }
    printf("model: %s  d_k=%d  %s  init_std=%g  seed=%llu\n\n", path ? path : CLI_DEFAULT_MODEL,
           m->cfg.d_k, m->cfg.scaled ? "scaled" : "unscaled", m->cfg.init_std,
           (unsigned long long)m->cfg.seed);
    printf("%-6s %-6s %6s %9s %9s %16s\n", "split", "level", "items", "accuracy", "loss",
           "attn_antecedent");
    const char *names[3] = {"train", "val", "test"};
    const qkv_example *sets[3] = {d.train, d.val, d.test};
    const int sizes[3] = {d.n_train, d.n_val, d.n_test};
    for (int s = 0; s < 3 && r == CLI_OK; s++)
        for (int level = 1; level <= QKV_LEVELS + 1; level++) {
            task_eval e;
            int lv = level > QKV_LEVELS ? 0 : level;
            if (task_evaluate(m, t, b, sets[s], sizes[s], lv, &e) != QKV_OK) {
                r = cli_fail("eval: %s", qkv_tape_error(t));
                break;
            }
            char lvl[8];
            snprintf(lvl, sizeof lvl, lv ? "%d" : "all", lv);
            printf("%-6s %-6s %6d %9.4f %9.4f %16.4f\n", names[s], lvl, e.n, e.acc, e.loss, e.mass);
        }
    qkv_dataset_free(&d);
    qkv_batch_free(b);
    qkv_tape_free(t);
    qkv_model_free(m);
    return r;
}
