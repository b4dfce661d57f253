/*
 * test_faults.c - allocation failures, injected one at a time at every
 * allocation point (qkv_alloc_fail_at, or QKV_TEST_ALLOC_FAIL for a whole
 * program): of a short training run in-process, of the qkv program's
 * training run over a checkpoint it must keep, of every example, and of
 * the runs that a sweep's --jobs hands to worker processes. Each
 * run must end with an error that says why, never a crash or a silent
 * success; under ASan (make asan) a leak fails the test too.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
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

/* Runs a shell command in dir with the environment variables env ("A=1
 * B=2"), its output in out.txt and err.txt; its exit code. */
static int run_with(const char *env, const char *command)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd '%s' && %s %s >out.txt 2>err.txt", dir, env, command);
    int status = system(cmd);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Runs a shell command in dir with QKV_TEST_ALLOC_FAIL=n; its exit code. */
static int run_failing(const char *command, size_t n)
{
    char env[64];
    snprintf(env, sizeof env, "QKV_TEST_ALLOC_FAIL=%zu", n);
    return run_with(env, command);
}

/* The file name in dir as text (caller frees). */
static char *text_of(const char *name)
{
    char path[256];
    size_t n;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unsigned char *b = slurp(path, &n);
    char *text = realloc(b, n + 1);
    text[n] = '\0';
    return text;
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
    static const char *examples[] = {"quickstart",    "custom_op", "train_coref", "xor_mlp",
                                     "least_squares", "mha",       "char_lm"};
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
                /* "(the arena has N bytes in use)" is the library's word: a
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

/* The number of entries (files, directories) in the directory name in
 * dir, "." and ".." left out. */
static int entries(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    DIR *d = opendir(path);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

/* An earlier sweep's table, s/runs.csv, for a failing run to keep. */
static void plant_earlier_table(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/s' && echo earlier >'%s/s/runs.csv'", dir, dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* What a failed sweep leaves: nothing on stdout (out.txt), and s/ with
 * the earlier table alone, as it was. */
static void expect_nothing_printed_and_the_table_kept(void)
{
    char *out = text_of("out.txt"), *csv = text_of("s/runs.csv");
    ck_assert_str_eq(out, "");
    ck_assert_str_eq(csv, "earlier\n");
    ck_assert_int_eq(entries("s"), 1);
    free(out);
    free(csv);
}

/* The allocation count a task reported (QKV_TEST_ALLOC_FAIL_TASK) in the
 * stderr e, whose line of the program's own count ("qkv-test: N
 * allocations", the parent's with --jobs) goes. */
static size_t task_count(char *e, int task)
{
    char *c = strstr(e, "qkv-test: task ");
    int t = -1;
    size_t k = 0;
    ck_assert_msg(c != NULL && sscanf(c, "qkv-test: task %d: %zu", &t, &k) == 2 && t == task,
                  "no count of task %d in '%s'", task, e);
    for (char *last = e; (last = strstr(last, "qkv-test: ")) != NULL; last++)
        if (last[10] >= '0' && last[10] <= '9')
            *last = '\0';
    return k;
}

/* With --jobs 2 a sweep's runs allocate in its worker processes, where
 * the walk never went: a worker counted on from its parent's count at
 * the fork, and the walk stopped at the parent's own count, the runs
 * left out. QKV_TEST_ALLOC_FAIL_TASK reaches every allocation of each
 * run, in whichever worker runs it: each failure ends the command with
 * exit 1 and the messages that --jobs 1 gives, nothing on stdout (no
 * table, no "wrote"), and the runs.csv of an earlier sweep as it was.
 * A run that follows another in the same process may allocate less
 * (what the first left allocated: the double build's second run makes
 * one allocation fewer), so a run that never reaches allocation n must
 * succeed instead. */
START_TEST(test_every_allocation_failure_in_a_worker_is_reported)
{
    static const char args[] =
        "saturation --quiet --dk 4 --steps 1 --log-every 1 --no-variance --out s";
    char cmd[2][600], env[128];
    for (int j = 0; j < 2; j++)
        snprintf(cmd[j], sizeof cmd[j], "'%s' %s --jobs %d", QKV_BIN, args, j + 1);
    size_t reached = 0;
    for (int task = 0; task < 2; task++) {
        snprintf(env, sizeof env, "QKV_TEST_ALLOC_FAIL=0 QKV_TEST_ALLOC_FAIL_TASK=%d", task);
        ck_assert_int_eq(run_with(env, cmd[1]), 0);
        char *e = text_of("err.txt");
        const size_t total = task_count(e, task);
        free(e);
        ck_assert_uint_gt(total, 10);
        for (size_t n = 1; n <= total; n++) {
            char *err[2];
            int rc[2];
            size_t count[2];
            snprintf(env, sizeof env, "QKV_TEST_ALLOC_FAIL=%zu QKV_TEST_ALLOC_FAIL_TASK=%d", n,
                     task);
            for (int j = 1; j >= 0; j--) {
                plant_earlier_table();
                rc[j] = run_with(env, cmd[j]);
                err[j] = text_of("err.txt");
                count[j] = task_count(err[j], task);
                if (count[j] < n) { /* never reached: a clean run */
                    ck_assert_msg(rc[j] == 0, "--jobs %d: task %d made %zu allocations: exit %d",
                                  j + 1, task, count[j], rc[j]);
                    continue;
                }
                reached += j == 1;
                char *out = text_of("out.txt"), *csv = text_of("s/runs.csv");
                ck_assert_msg(rc[j] == 1 && strncmp(err[j], "qkv: saturation: ", 17) == 0,
                              "--jobs %d: task %d: allocation %zu of %zu failed: exit %d, '%s'",
                              j + 1, task, n, total, rc[j], err[j]);
                ck_assert_msg(out[0] == '\0' && strcmp(csv, "earlier\n") == 0 && entries("s") == 1,
                              "--jobs %d: task %d: allocation %zu failed, and it printed\n%s\n"
                              "and left runs.csv\n%s\nand %d file(s) in its directory",
                              j + 1, task, n, out, csv, entries("s"));
                free(out);
                free(csv);
            }
            if (count[0] >= n && count[1] >= n)
                ck_assert_msg(strcmp(err[0], err[1]) == 0,
                              "task %d: allocation %zu: --jobs 1 said\n%s--jobs 2 said\n%s", task,
                              n, err[0], err[1]);
            free(err[0]);
            free(err[1]);
        }
    }
    ck_assert_uint_gt(reached, 40);
}
END_TEST

/* A worker that could not write its results (a full disk; here a limit
 * on the size of a file) said "a worker could not write its results",
 * without the reason, once for each worker; and one whose last write
 * failed as it ended said nothing: the command exited 1 in silence. One
 * line now says why, and nothing is written. Repeated: which worker runs
 * which task, and fails where, varies. */
START_TEST(test_a_worker_that_cannot_write_its_results_says_why_once)
{
    char cmd[900];
    snprintf(cmd, sizeof cmd,
             "sh -c \"trap '' XFSZ; ulimit -f 2; exec '%s' saturation --quiet --dk 4,8 --steps 20 "
             "--log-every 1 --no-variance --jobs 2 --out s\"",
             QKV_BIN);
    char why[128];
    snprintf(why, sizeof why, ": a worker could not write its results: %s\n", strerror(EFBIG));
    for (int i = 0; i < 4; i++) {
        plant_earlier_table();
        const int rc = run_with("", cmd);
        char *err = text_of("err.txt");
        const char *nl = strchr(err, '\n');
        /* "qkv: saturation: the scaled run at d_k 8, seed 1: a worker ..." */
        ck_assert_msg(rc == 1 && strncmp(err, "qkv: saturation: the ", 21) == 0 && nl != NULL &&
                          nl[1] == '\0' && strstr(err, why) == nl - strlen(why) + 1,
                      "exit %d, stderr:\n%s", rc, err);
        expect_nothing_printed_and_the_table_kept();
        free(err);
    }
}
END_TEST

/* A worker that died was reported as "a worker process was ended by
 * signal 9 (Killed)", which did not say which run it took with it; one
 * that ended with status 1 and said nothing left the command to exit 1
 * in silence; and results cut short were "cannot read a worker's results
 * back". QKV_TEST_WORKER_FAULT makes the worker that takes a run die in
 * each of these ways: one line names the run and says what happened,
 * nothing goes to stdout, and the earlier table stays. */
START_TEST(test_a_worker_that_dies_is_named_by_its_run)
{
    static const struct {
        const char *args, *table, *runs[2];
    } sweeps[] = {
        {"distance --quiet --models attention --distances 0 --seeds 2 --steps 2 --eval-every 1",
         "runs.csv",
         {"distance: the run of attention at distance 0, seed 1",
          "distance: the run of attention at distance 0, seed 2"}},
        {"saturation --quiet --dk 4 --steps 1 --log-every 1 --no-variance --seed 7",
         "runs.csv",
         {"saturation: the scaled run at d_k 4, seed 7",
          "saturation: the unscaled run at d_k 4, seed 7"}},
        {"ablate --quiet --variants full,no-v --steps 1 --eval-every 1 --seeds 1",
         "curves.csv",
         {"ablate: the run of full, seed 1", "ablate: the run of no-v, seed 1"}},
    };
    static const char *const faults[] = {"kill", "exit", "cut"};
    char whys[3][128];
    snprintf(whys[0], sizeof whys[0], "a worker process was ended by signal %d (%s)", SIGKILL,
             strsignal(SIGKILL));
    snprintf(whys[1], sizeof whys[1], "a worker process ended with status 1 without saying why");
    snprintf(whys[2], sizeof whys[2], "the results a worker wrote were cut short");
    for (size_t i = 0; i < sizeof sweeps / sizeof sweeps[0]; i++) {
        char cmd[600], earlier[300], table[64];
        snprintf(cmd, sizeof cmd, "'%s' %s --jobs 2 --out o", QKV_BIN, sweeps[i].args);
        snprintf(table, sizeof table, "o/%s", sweeps[i].table);
        snprintf(earlier, sizeof earlier, "mkdir -p '%s/o' && echo earlier >'%s/%s'", dir, dir,
                 table);
        for (int f = 0; f < 3; f++)
            for (int task = 0; task < 2; task++) {
                char env[64], want[512];
                ck_assert_int_eq(system(earlier), 0);
                snprintf(env, sizeof env, "QKV_TEST_WORKER_FAULT=%d:%s", task, faults[f]);
                const int rc = run_with(env, cmd);
                char *err = text_of("err.txt"), *out = text_of("out.txt"), *csv = text_of(table);
                snprintf(want, sizeof want, "qkv: %s: %s\n", sweeps[i].runs[task], whys[f]);
                ck_assert_msg(rc == 1 && strcmp(err, want) == 0, "%s %s: exit %d, stderr:\n%s", env,
                              sweeps[i].args, rc, err);
                ck_assert_str_eq(out, "");
                ck_assert_str_eq(csv, "earlier\n");
                ck_assert_int_eq(entries("o"), 1);
                free(err);
                free(out);
                free(csv);
            }
        snprintf(cmd, sizeof cmd, "rm -r '%s/o'", dir);
        ck_assert_int_eq(system(cmd), 0);
    }
}
END_TEST

/* When a worker died, its parent waited for the others to run every run
 * left, minutes or hours of a long sweep, for a command that had already
 * failed; it now stops them at once and says why. The run at distance 0
 * would take hours: the command must end long before (the limit is not
 * a measurement). */
START_TEST(test_a_worker_that_dies_stops_the_others)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int e = -1;
        if (chdir(dir) != 0 || setenv("QKV_TEST_WORKER_FAULT", "1:kill", 1) != 0 ||
            (e = open("err.txt", O_WRONLY | O_CREAT | O_TRUNC, 0666)) < 0 || dup2(e, 2) < 0)
            _exit(99);
        execl(QKV_BIN, "qkv", "distance", "--models", "rnn", "--distances", "0,1", "--steps",
              "5000000", "--seeds", "1", "--jobs", "2", "--quiet", "--out", "d", (char *)NULL);
        _exit(98);
    }
    int status = 0, ended = 0;
    for (int i = 0; i < 6000 && !ended; i++) { /* up to a minute */
        ended = waitpid(pid, &status, WNOHANG) == pid;
        if (!ended) {
            struct timespec ts = {0, 10000000L};
            nanosleep(&ts, NULL);
        }
    }
    if (!ended) { /* its workers end with it */
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    ck_assert_msg(ended, "qkv distance still ran a minute after a worker died");
    char *err = text_of("err.txt"), want[256];
    snprintf(want, sizeof want,
             "qkv: distance: the run of rnn at distance 1, seed 1: a worker process was ended by "
             "signal %d (%s)\n",
             SIGKILL, strsignal(SIGKILL));
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 1 && strcmp(err, want) == 0,
                  "status %#x, stderr:\n%s", status, err);
    free(err);
}
END_TEST

/* saturation's Var(q·k) table is a task, and it wrote variance.csv
 * itself, in the worker that ran it: a sweep whose run failed replaced
 * the earlier variance.csv all the same with --jobs 2 (not with --jobs 1,
 * where the table is the last task and never runs after a failure), and
 * a worker stopped in it (killed, or its parent killed) left its
 * temporary file, .variance.csv.XXXXXX, behind. The parent now writes
 * the table, once the runs are whole. The table (d_k 512) is the
 * costliest task, taken first; the other worker's first run fails, or
 * its last one dies (and the parent stops the table's worker). */
START_TEST(test_a_failed_sweep_keeps_its_earlier_variance_table)
{
    static const char *const envs[] = {"QKV_TEST_ALLOC_FAIL=5 QKV_TEST_ALLOC_FAIL_TASK=0",
                                       "QKV_TEST_WORKER_FAULT=1:kill"};
    char cmd[600], earlier[300];
    snprintf(cmd, sizeof cmd, "'%s' saturation --quiet --dk 512 --steps 2 --jobs 2 --out s",
             QKV_BIN);
    snprintf(earlier, sizeof earlier,
             "mkdir -p '%s/s' && echo earlier >'%s/s/runs.csv' && echo earlier "
             ">'%s/s/variance.csv'",
             dir, dir, dir);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(system(earlier), 0);
        const int rc = run_with(envs[i], cmd);
        char *err = text_of("err.txt"), *var = text_of("s/variance.csv");
        ck_assert_msg(rc == 1, "%s: exit %d, stderr:\n%s", envs[i], rc, err);
        ck_assert_msg(strcmp(var, "earlier\n") == 0, "%s: variance.csv is now\n%s", envs[i], var);
        ck_assert_msg(entries("s") == 2, "%s: %d files in the directory", envs[i], entries("s"));
        free(err);
        free(var);
    }
}
END_TEST

/* saturation printed its summary table before it wrote runs.csv: a
 * sweep that could not write it (a full disk; here a limit on the size
 * of a file) printed the table of a sweep that seemed to succeed, then
 * failed. The tables are now printed once the files are written. */
START_TEST(test_a_sweep_that_cannot_write_its_table_prints_none)
{
    char cmd[900];
    snprintf(cmd, sizeof cmd,
             "sh -c \"trap '' XFSZ; ulimit -f 4; exec '%s' saturation --quiet --dk 4 --steps 20 "
             "--log-every 1 --no-variance --out s\"",
             QKV_BIN);
    plant_earlier_table();
    const int rc = run_with("", cmd);
    char *err = text_of("err.txt");
    /* the size limit's own reason, not the close's "Input/output error" */
    char want[160];
    snprintf(want, sizeof want, "qkv: saturation: cannot write s/runs.csv: %s\n", strerror(EFBIG));
    ck_assert_msg(rc == 1 && strcmp(err, want) == 0, "exit %d, stderr:\n%s", rc, err);
    expect_nothing_printed_and_the_table_kept();
    free(err);
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
    /* the sweeps: the worker processes of --jobs, and the tables */
    TCase *tw = tcase_create("workers");
    tcase_set_timeout(tw, 600);
    tcase_add_checked_fixture(tw, setup, teardown);
    tcase_add_test(tw, test_every_allocation_failure_in_a_worker_is_reported);
    tcase_add_test(tw, test_a_worker_that_cannot_write_its_results_says_why_once);
    tcase_add_test(tw, test_a_worker_that_dies_is_named_by_its_run);
    tcase_add_test(tw, test_a_worker_that_dies_stops_the_others);
    tcase_add_test(tw, test_a_failed_sweep_keeps_its_earlier_variance_table);
    tcase_add_test(tw, test_a_sweep_that_cannot_write_its_table_prints_none);
    suite_add_tcase(s, tw);
    return s;
}
