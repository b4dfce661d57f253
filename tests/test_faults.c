/*
 * test_faults.c - allocation failures, injected one at a time at every
 * allocation point (qkv_alloc_fail_at, or QKV_TEST_ALLOC_FAIL for a whole
 * program): of a short training run in-process, of the qkv program's
 * training run over a checkpoint it must keep, and of every example. Each
 * run must end with an error that says why, never a crash or a silent
 * success; under ASan (make asan) a leak fails the test too.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests.h"

static char dir[64];

static void setup(void)
{
    strcpy(dir, "/tmp/qkv_faults_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* The whole file at path (caller frees), its size in *n. */
static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    unsigned char *b = malloc(1 << 20);
    *n = fread(b, 1, 1 << 20, f);
    fclose(f);
    return b;
}

/* A short training run from scratch: data, model, optimizer, tape,
 * batches, three updates, an evaluation, and a checkpoint saved to path. */
static qkv_status short_run(const char *path, qkv_error *err)
{
    qkv_coref_data d = {0};
    qkv_coref_model *m = NULL;
    qkv_optim *o = NULL;
    qkv_tape *t = NULL;
    qkv_coref_batch *b = NULL, *eb = NULL;
    qkv_coref_config mc = {qkv_coref_vocab_size(), 8, qkv_coref_classes(), 1, 0.1, 3};
    qkv_optim_config oc = qkv_optim_defaults(QKV_ADAM);
    qkv_coref_eval val;
    qkv_status s = qkv_coref_data_build(&d, QKV_COREF_ALL_LEVELS, 3, err);
    if (s == QKV_OK && ((m = qkv_coref_model_new(&mc, err)) == NULL ||
                        (o = qkv_optim_new(&oc, m->params, QKV_COREF_PARAMS, err)) == NULL ||
                        (t = qkv_tape_new(4096, err)) == NULL ||
                        (b = qkv_coref_batch_new(8, QKV_COREF_MAX_TOKENS, err)) == NULL ||
                        (eb = qkv_coref_batch_new(64, QKV_COREF_MAX_TOKENS, err)) == NULL))
        s = err->status;
    if (s == QKV_OK)
        s = qkv_coref_fit(m, o, t, b, &d, 3, 4, NULL, NULL, NULL, err);
    if (s == QKV_OK && (s = qkv_coref_evaluate(m, t, eb, d.val, d.n_val, 0, &val)) != QKV_OK)
        qkv_error_set(err, s, "%s", qkv_tape_error(t));
    if (s == QKV_OK)
        s = qkv_coref_save(m, qkv_coref_fingerprint(), path, err);
    qkv_coref_batch_free(eb);
    qkv_coref_batch_free(b);
    qkv_tape_free(t);
    qkv_optim_free(o);
    qkv_coref_model_free(m);
    qkv_coref_data_free(&d);
    return s;
}

START_TEST(test_every_allocation_failure_of_a_training_run_is_reported)
{
    char path[128];
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    qkv_error err = qkv_error_none();
    size_t before = qkv_alloc_count();
    ck_assert_int_eq(short_run(path, &err), QKV_OK);
    size_t total = qkv_alloc_count() - before, n0;
    unsigned char *good = slurp(path, &n0);
    ck_assert_uint_gt(total, 20);
    for (size_t n = 1; n <= total; n++) {
        qkv_alloc_fail_at(qkv_alloc_count() + n);
        err = qkv_error_none();
        qkv_status s = short_run(path, &err);
        ck_assert_msg(s != QKV_OK, "allocation %zu of %zu failed, and the run succeeded", n, total);
        ck_assert_msg(err.status == s && err.message[0] != '\0',
                      "allocation %zu of %zu: status %d with no message", n, total, (int)s);
        size_t n1;
        unsigned char *now = slurp(path, &n1);
        ck_assert_msg(n1 == n0 && memcmp(now, good, n0) == 0,
                      "allocation %zu of %zu: the previous checkpoint changed", n, total);
        free(now);
    }
    qkv_alloc_fail_at(0);
    free(good);
}
END_TEST

/* Runs a shell command in dir with QKV_TEST_ALLOC_FAIL=n; its exit code. */
static int run_failing(const char *command, size_t n)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd '%s' && QKV_TEST_ALLOC_FAIL=%zu %s >out.txt 2>err.txt", dir, n,
             command);
    int status = system(cmd);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* stderr of the last run_failing, and the allocation count it ends with. */
static char *last_stderr(size_t *count)
{
    char path[128];
    size_t n;
    snprintf(path, sizeof path, "%s/err.txt", dir);
    unsigned char *e = slurp(path, &n);
    char *text = realloc(e, n + 1);
    text[n] = '\0';
    const char *c = strstr(text, "qkv-test: ");
    ck_assert_msg(c != NULL, "no allocation count in '%s'", text);
    *count = (size_t)strtoull(c + 10, NULL, 10);
    return text;
}

/* Walks the failing allocation over every allocation of a program (as
 * many as a clean run counts): each run must exit 1 and say why on stderr,
 * and leave the file keep (if any) as it was. Returns the count. */
static size_t walk(const char *command, const char *keep)
{
    size_t total, k0 = 0, ignore;
    unsigned char *kept = NULL;
    char path[256];
    ck_assert_int_eq(run_failing(command, 0), 0);
    free(last_stderr(&total));
    if (keep != NULL) {
        snprintf(path, sizeof path, "%s/%s", dir, keep);
        kept = slurp(path, &k0);
    }
    for (size_t n = 1; n <= total; n++) {
        int rc = run_failing(command, n);
        char *e = last_stderr(&ignore);
        ck_assert_msg(rc == 1 && strncmp(e, "qkv-test: ", 10) != 0,
                      "%s: allocation %zu of %zu failed: exit %d, stderr '%s'", command, n, total,
                      rc, e);
        free(e);
        if (kept != NULL) {
            size_t k1;
            unsigned char *now = slurp(path, &k1);
            ck_assert_msg(k1 == k0 && memcmp(now, kept, k0) == 0,
                          "%s: allocation %zu failed and %s changed", command, n, keep);
            free(now);
        }
    }
    ck_assert_int_eq(run_failing(command, total + 1), 0);
    free(kept);
    return total;
}

START_TEST(test_the_program_reports_every_allocation_failure_and_keeps_its_checkpoint)
{
    char cmd[900];
    snprintf(cmd, sizeof cmd,
             "'%s' train --quiet --steps 2 --d-k 4 --save m.safetensors --log l.csv", QKV_BIN);
    ck_assert_int_eq(run_failing(cmd, 0), 0); /* the checkpoint to keep */
    size_t points = walk(cmd, "m.safetensors");
    ck_assert_uint_gt(points, 20);
}
END_TEST

START_TEST(test_every_example_reports_every_allocation_failure)
{
    static const char *examples[] = {"quickstart", "custom_op",     "train_coref",
                                     "xor_mlp",    "least_squares", "mha"};
    char bin[512], cmd[600];
    snprintf(bin, sizeof bin, "%s", QKV_BIN);
    *strrchr(bin, '/') = '\0';
    for (size_t i = 0; i < sizeof examples / sizeof examples[0]; i++) {
        snprintf(cmd, sizeof cmd, "'%s/examples/%s'", bin, examples[i]);
        ck_assert_uint_gt(walk(cmd, NULL), 2);
    }
}
END_TEST

/* Running out of memory, a CLI user was told the library's hint for C
 * programmers: "did a loop forget qkv_tape_reset?". Every allocation of
 * a run of each command that grows its tape fails in turn: no message
 * names a C function (qkv_...), and each one about memory names the
 * options that would lower it. Which one is about memory went by the
 * words "out of memory" in it; it goes by the failure's status,
 * QKV_ERR_NOMEM, which every failed allocation gives, the library's and
 * the program's own: the advice ends the first line of the message,
 * once. */
START_TEST(test_out_of_memory_names_the_options_to_lower_not_c_functions)
{
    static const struct {
        const char *args, *advice;
        int every; /* 1: every failure is one of memory, with the advice */
    } runs[] = {
        {"train --quiet --steps 1 --batch 4096 --log t.csv --save m.st",
         "try a smaller --batch or --d-k", 1},
        /* the checkpoint's loader reported a string it could not copy as
         * malformed ("a tensor name is too long or holds a NUL") */
        {"eval --model m.st", "try a model trained with a smaller --d-k", 1},
        {"demo --d-model 256 --seq-len 256 --d-k 256",
         "try a smaller --d-model, --seq-len or --d-k", 1},
        {"saturation --quiet --dk 4 --steps 1 --batch 1024 --log-every 1 --no-variance --out s",
         "try a smaller --batch or --dk, or fewer --jobs", 1},
        {"distance --quiet --steps 2 --eval-every 1 --seeds 1 --distances 0 --models attention "
         "--batch 4096 --out d",
         "try a smaller --batch or --distances, or fewer --jobs", 1},
        {"bptt --quiet --train-steps 0 --length 16 --batch 128 --rho 1 --out b",
         "try a smaller --batch or --length", 1},
        /* a critical path's table that could not be allocated was
         * reported as "parallel: " and nothing more */
        {"parallel --quiet --lengths 16 --batch 512 --min-time 0.001 --threads 1 --models "
         "attention --out p",
         "try a smaller --batch or --lengths", 1},
        {"ablate --quiet --steps 1 --eval-every 1 --seeds 1 --variants full --batch 1024 --out a",
         "try a smaller --batch or --d-k, or fewer --jobs", 1},
    };
    char cmd[900];
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        const char *args = runs[i].args, *advice = runs[i].advice;
        snprintf(cmd, sizeof cmd, "'%s' %s", QKV_BIN, args);
        ck_assert_int_eq(run_failing(cmd, 0), 0); /* m.st for eval, from train */
        size_t total, ignore, tape = 0;
        free(last_stderr(&total));
        for (size_t n = 1; n <= total; n++) {
            const int rc = run_failing(cmd, n);
            char *e = last_stderr(&ignore);
            *strstr(e, "qkv-test: ") = '\0';
            /* every failure fails the run (distance printed "params 0"
             * for a model it could not make to count, and exited 0) */
            ck_assert_msg(rc == 1, "%s: allocation %zu: exit %d\n%s", args, n, rc, e);
            ck_assert_msg(strstr(e, "qkv_") == NULL, "%s: allocation %zu:\n%s", args, n, e);
            const char *at = strstr(e, advice), *nl = strchr(e, '\n');
            if (runs[i].every)
                ck_assert_msg(at != NULL && at + strlen(advice) == nl && at[-2] == ';' &&
                                  strstr(at + 1, advice) == NULL,
                              "%s: allocation %zu: '; %s' does not end the first line, once:\n%s",
                              args, n, advice, e);
            else if (strstr(e, "out of memory") != NULL)
                ck_assert_msg(at != NULL, "%s: allocation %zu: no '%s':\n%s", args, n, advice, e);
            if (strstr(e, "out of memory allocating") != NULL) {
                /* "(the arena holds N bytes)" is the library's word: a
                 * user reads what was in use */
                ck_assert_msg(strstr(e, "arena") == NULL && strstr(e, " bytes in use)") != NULL,
                              "%s: allocation %zu:\n%s", args, n, e);
                tape++;
            }
            free(e);
        }
        /* the tape's own message was among them, where the tape grows */
        ck_assert_msg(tape > 0 || i == 1, "%s: the tape never ran out", args);
    }
}
END_TEST

Suite *faults_suite(void)
{
    Suite *s = suite_create("faults");
    TCase *tc = tcase_create("allocation");
    tcase_set_timeout(tc, 600);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_every_allocation_failure_of_a_training_run_is_reported);
    tcase_add_test(tc, test_the_program_reports_every_allocation_failure_and_keeps_its_checkpoint);
    tcase_add_test(tc, test_every_example_reports_every_allocation_failure);
    tcase_add_test(tc, test_out_of_memory_names_the_options_to_lower_not_c_functions);
    suite_add_tcase(s, tc);
    return s;
}
