/*
 * test_cli.c - the qkv program end to end: help, usage errors, train with
 * its defaults, divergence, eval, resolve and its errors. Runs the built
 * binary (QKV_BIN) in a temporary directory.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests.h"
#include "cli/cli.h"

static char tmp[64];

static void setup(void)
{
    strcpy(tmp, "/tmp/qkv_cli_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    ck_assert_int_eq(system(cmd), 0);
}

/* Runs a shell command inside tmp with stderr merged; returns the exit code
 * and the output (caller frees). */
static int sh(const char *command, char **out)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cd '%s' && %s 2>&1", tmp, command);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += got;
        if (n + 1 == cap)
            buf = realloc(buf, cap *= 2);
    }
    buf[n] = '\0';
    int status = pclose(p);
    *out = buf;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static char *slurp_path(const char *p);

/* Runs `qkv ARGS` inside tmp, as sh() does. */
static int run(const char *args, char **out)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' %s", QKV_BIN, args);
    return sh(cmd, out);
}

static void expect(const char *args, int code, const char *part)
{
    char *out;
    int rc = run(args, &out);
    ck_assert_msg(rc == code, "qkv %s: exit %d, expected %d\n%s", args, rc, code, out);
    ck_assert_msg(strstr(out, part) != NULL, "qkv %s: output lacks '%s':\n%s", args, part, out);
    free(out);
}

START_TEST(test_every_command_has_help)
{
    static const char *cmds[] = {"demo",    "gradcheck",  "train",   "eval",
                                 "resolve", "saturation", "softmax", "distance",
                                 "bptt",    "parallel",   "ablate",  "inspect"};
    char args[64], want[64];
    expect("--help", 0, "Usage: qkv <command>");
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        snprintf(args, sizeof args, "%s --help", cmds[i]);
        snprintf(want, sizeof want, "Usage: qkv %s", cmds[i]);
        expect(args, 0, want);
    }
    expect("gradcheck --help", 0, "Usage: qkv gradcheck\n"); /* no blank before the end */
    /* it says what it checks (the layers too) and what its status means */
    expect("gradcheck --help", 0, "of every layer (linear, mha, ffn, the Transformer");
    expect("gradcheck --help", 0, "status is 1 when any check fails.");
    /* and each fits a terminal of 80 columns (options' lines were up to
     * 117 wide), the wrapped part of a description under its start */
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char *out;
        snprintf(args, sizeof args, "%s --help", cmds[i]);
        ck_assert_int_eq(run(args, &out), 0);
        char *save = NULL;
        int options = 0;
        for (char *l = strtok_r(out, "\n", &save); l != NULL; l = strtok_r(NULL, "\n", &save)) {
            ck_assert_msg(cli_text_width(l) <= 79, "qkv %s: %d columns: %s", args,
                          cli_text_width(l), l);
            options = options || strcmp(l, "Options:") == 0;
            if (options && l[0] == ' ' && l[2] != '-') /* a description's continuation */
                ck_assert_msg(strspn(l, " ") == 29, "qkv %s: '%s'", args, l);
        }
        free(out);
    }
}
END_TEST

/* The columns a line of UTF-8 takes on a terminal, counted here apart
 * from the code under test: an ASCII byte is one, any other character
 * two (the non-ASCII in qkv's help is CJK, which is wide). */
static int help_columns(const char *l)
{
    int w = 0;
    for (const unsigned char *p = (const unsigned char *)l; *p != '\0'; p++)
        if (*p < 0x80)
            w++;
        else if ((*p & 0xC0) != 0x80) /* a lead byte, not a continuation */
            w += 2;
    return w;
}

START_TEST(test_top_level_help_fits_80_columns)
{
    /* the list of commands too, not only each command's own --help: the
     * softmax line was 82 columns wide */
    static const char *const forms[] = {"--help", "help", "-h"};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        char *out;
        ck_assert_int_eq(run(forms[i], &out), 0);
        ck_assert_ptr_nonnull(strstr(out, "  softmax      "));
        char *save = NULL;
        for (char *l = strtok_r(out, "\n", &save); l != NULL; l = strtok_r(NULL, "\n", &save))
            ck_assert_msg(help_columns(l) <= 79, "qkv %s: %d columns: %s", forms[i],
                          help_columns(l), l);
        free(out);
    }
}
END_TEST

START_TEST(test_usage_errors_exit_2_with_a_message)
{
    expect("", 2, "Usage: qkv <command>");
    expect("frobnicate", 2, "unknown command 'frobnicate'");
    expect("train --steps", 2, "--steps needs a value");
    expect("train --steps ten", 2, "--steps: 'ten' is not a whole number");
    expect("train --optim rmsprop", 2, "is not sgd, adam or adamw");
    expect("train --momentum 0.9", 2, "--momentum is for --optim sgd, not adam");
    expect("train --levels 4", 2, "--levels");
    expect("demo --bogus", 2, "unknown option '--bogus'");
    expect("demo --seq-len 9", 2, "exceeds --d-model");
    expect("distance --models rnn,cnn", 2, "--models: 'rnn,cnn' is not a list");
    expect("distance --models rnn,rnn", 2, "is not a list of distinct models");
    expect("distance --distances 4,,8", 2, "--distances: '4,,8' is not a list");
    expect("distance --forget-bias lots", 2, "--forget-bias: 'lots' is not a number");
    expect("distance --forget-bias 100.5", 2,
           "--forget-bias: '100.5' is not a number in [-100, 100] or 'pytorch'");
    expect("distance --forget-bias -100.5", 2,
           "--forget-bias: '-100.5' is not a number in [-100, 100] or 'pytorch'");
    /* the bias is the LSTM's alone: without one in --models it was taken
     * and ignored, the runs unlike what the command line said (the short
     * run keeps a regression quick) */
    expect("distance --models rnn,gru --forget-bias 3 --distances 0 --seeds 1 --steps 1", 2,
           "qkv: --forget-bias is the LSTM's forget-gate bias; "
           "--models 'rnn,gru' has no lstm\n");
    expect("distance --models attention --forget-bias pytorch --distances 0 --seeds 1 --steps 1", 2,
           "--models 'attention' has no lstm");
    expect("bptt --rho 0.5,0", 2,
           "--rho: '0.5,0' is not a list of up to 16 distinct radii in (0, 10]");
    /* a repeat in a list would run and print the same cells twice */
    expect("bptt --rho 0.5,0.50", 2, "is not a list of up to 16 distinct radii");
    expect("distance --distances 0,0", 2, "is not a list of up to 16 distinct distances");
    expect("saturation --dk 4,16,4", 2, "is not a list of up to 16 distinct values of d_k");
    expect("parallel --lengths 16,16", 2, "is not a list of up to 16 distinct lengths");
    expect("parallel --models rnn,rnn", 2, "is not a list of distinct models");
    expect("bptt --length 8", 2, "--length");
    expect("parallel --lengths 8", 2, "--lengths: '8' is not a list");
    expect("distance --models rnn,,lstm", 2, "--models: 'rnn,,lstm' is not a list");
    expect("parallel --models rnn,,gru", 2, "--models: 'rnn,,gru' is not a list");
    expect("bptt --rho 0.5,,1", 2, "--rho: '0.5,,1' is not a list");
    expect("ablate --task poetry", 2, "--task: 'poetry' is neither coref nor roles");
    expect("ablate --variants full,no-q", 2, "--variants: 'full,no-q' is not a list");
    expect("ablate --task roles --variants shared-qk", 2, "distinct roles variants");
    expect("ablate --steps 5 --eval-every 10", 2, "--eval-every 10 is more than --steps 5");
    /* one more than --steps is more (the run is short if it is taken) */
    expect("ablate --steps 1 --eval-every 2 --seeds 1 --variants full --quiet --out ab", 2,
           "--eval-every 2 is more than --steps 1");
    expect("distance --steps 5 --eval-every 10", 2, "--eval-every 10 is more than --steps 5");
    expect("softmax --base 1", 2, "--base");
    /* a repeat printed the same column twice, under one CSV header name */
    expect("softmax --base e,e", 2, "--base: 'e,e' is not a list of up to 4 distinct bases");
    expect("softmax --base 2,10,2.0", 2, "--base: '2,10,2.0' is not a list");
#ifdef QKV_DOUBLE
    expect("softmax --base 10 1e308,1", 2, "is too large for the scalar type");
#else
    expect("softmax --base 10 3e38,1", 2, "is too large for the scalar type");
#endif
    expect("ablate --variants full,,no-v", 2, "--variants: 'full,,no-v' is not a list");
}
END_TEST

/* The train log's part file is created exclusively: a symbolic link (or
 * file) planted at its path, even after train removed what was there, is
 * refused and its target left as it was. */
START_TEST(test_a_new_csv_never_writes_through_a_planted_link)
{
    char victim[128], part[128];
    snprintf(victim, sizeof victim, "%s/victim.txt", tmp);
    snprintf(part, sizeof part, "%s/planted.csv.part", tmp);
    FILE *v = fopen(victim, "w");
    ck_assert_ptr_nonnull(v);
    fputs("keep\n", v);
    fclose(v);
    ck_assert_int_eq(symlink(victim, part), 0);
    qkv_error err = qkv_error_none();
    ck_assert_ptr_null(cli_csv_create_new(part, "a,b", &err));
    ck_assert_msg(strstr(err.message, "cannot write") != NULL, "%s", err.message);
    char line[16] = "";
    v = fopen(victim, "r");
    ck_assert_ptr_nonnull(v);
    ck_assert_ptr_nonnull(fgets(line, sizeof line, v));
    fclose(v);
    ck_assert_str_eq(line, "keep\n");
    /* and where nothing is planted, it writes as cli_csv_create does */
    ck_assert_int_eq(unlink(part), 0);
    FILE *f = cli_csv_create_new(part, "a,b", &err);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(cli_fclose(f), 0);
    unlink(part);
    unlink(victim);
}
END_TEST

/* parallel --flush-denormals: the same critical paths, and step times
 * (x86 has the mode; elsewhere the option is refused with a message) */
START_TEST(test_parallel_flushes_denormals_on_request)
{
#if defined(__x86_64__) || defined(__i386__)
    expect("parallel --models rnn --lengths 9 --threads 1 --min-time 0.001 --flush-denormals "
           "--quiet",
           0, "rnn");
    char path[128];
    snprintf(path, sizeof path, "%s/out/parallel/steps.csv", tmp);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char line[256];
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
    ck_assert_msg(strncmp(line, "rnn,9,1,31,", 11) == 0, "%s", line);
    fclose(f);
#endif
}
END_TEST

START_TEST(test_train_defaults_reach_the_accuracy_then_eval_and_resolve)
{
    char *out;
    ck_assert_int_eq(run("train --quiet", &out), 0);
    char *final = strstr(out, "final: ");
    ck_assert_msg(final != NULL, "%s", out);
    double loss, tr, va, te, mass;
    int steps;
    ck_assert_int_eq(sscanf(final,
                            "final: steps=%d loss=%lf train_acc=%lf val_acc=%lf test_acc=%lf "
                            "attn_antecedent=%lf",
                            &steps, &loss, &tr, &va, &te, &mass),
                     6);
    ck_assert_msg(te >= 0.99 && mass >= 0.9, "test_acc %.4f attn %.4f", te, mass);
    /* the loss ends near 1e-6: printed to four significant digits, not
     * four decimals (which gave 0.0000) */
    ck_assert_msg(loss > 0 && loss < 1e-3, "%s", final);
    free(out);
    char path[128];
    snprintf(path, sizeof path, "%s/out/train.csv", tmp);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char line[512];
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
    ck_assert_str_eq(line, "step,train_loss,train_acc,val_loss,val_acc,attn_antecedent,"
                           "gnorm_wq,gnorm_wk,gnorm_wv,gnorm_wo\n");
    int rows = 0;
    while (fgets(line, sizeof line, f))
        rows++;
    fclose(f);
    ck_assert_int_eq(rows, 60);
    expect("eval", 0, "test   all");
    expect("resolve \"小明是个运动达人，他平时很爱打篮球\"", 0, "他 → 小明");
    /* both pronouns, in an order no template uses */
    char *o2;
    ck_assert_int_eq(run("resolve \"小红和阿杰是朋友，他爱打篮球，她喜欢唱歌\"", &o2), 0);
    ck_assert_msg(strstr(o2, "他 → 阿杰") && strstr(o2, "她 → 小红"), "%s", o2);
    free(o2);
    expect("resolve \"因为他很爱跑步，所以小雪和小强去公园\"", 0, "他 → 小强");
    expect("resolve --csv out/heat.csv \"小明是个运动达人，他平时很爱打篮球\"", 0, "他 → 小明");
    /* resolve errors: one line, exit 1 */
    expect("resolve \"小明很爱唱歌\"", 1, "no pronoun");
    /* an empty sentence (an unset shell variable, say) was "no pronoun",
     * as if words had been read: it is a sentence not given */
    expect("resolve \"\"", 2, "qkv: the sentence is empty: give one, e.g. \"");
    expect("resolve \" 　 \"", 2, "qkv: the sentence is empty (only spaces): give one");
    expect("resolve \"小明是个运动达人，他平时很爱打排球\"", 1,
           "unknown word \"排球\" at character 15");
    expect("resolve \"$(printf '\\344\\273')\"", 1,
           "qkv: resolve: the sentence has invalid UTF-8 at byte 0\n");
    expect("resolve --model nowhere.safetensors \"他\"", 1,
           "qkv: resolve: cannot open nowhere.safetensors");
}
END_TEST

/* Values of the column named col of the CSV text, in the rows whose
 * column key equals want (all rows for key NULL); the count. */
static int csv_column(const char *text, const char *key, const char *want, const char *col,
                      double *out, int max)
{
    char *copy = strdup(text), *save = NULL;
    int ck = -1, cc = -1, n = 0;
    for (char *line = strtok_r(copy, "\n", &save); line != NULL && n < max;
         line = strtok_r(NULL, "\n", &save)) {
        char *fields[16], *fs = NULL;
        int nf = 0;
        for (char *f = strtok_r(line, ",", &fs); f != NULL && nf < 16; f = strtok_r(NULL, ",", &fs))
            fields[nf++] = f;
        if (cc < 0) { /* the header */
            for (int i = 0; i < nf; i++) {
                if (key != NULL && strcmp(fields[i], key) == 0)
                    ck = i;
                if (strcmp(fields[i], col) == 0)
                    cc = i;
            }
            ck_assert_msg(cc >= 0 && (key == NULL || ck >= 0), "no column %s", col);
            continue;
        }
        if (key == NULL || strcmp(fields[ck], want) == 0)
            out[n++] = atof(fields[cc]);
    }
    free(copy);
    return n;
}

START_TEST(test_distance_rnn_and_attention_resolve_adjacent_pronouns)
{
    /* at distance 0 and 3 (an odd one: 小明今天也跑步，他很爱画画), 300 steps */
    char *out;
    ck_assert_int_eq(run("distance --quiet --models rnn,attention --distances 0,3 --seeds 1 "
                         "--steps 300 --out d",
                         &out),
                     0);
    ck_assert_msg(strstr(out, "Test accuracy"), "%s", out);
    free(out);
    char path[160];
    snprintf(path, sizeof path, "%s/d/runs.csv", tmp);
    char *csv = slurp_path(path);
    ck_assert_msg(strncmp(csv, "model,distance,seed,test_acc,steps_to_90,diverged,seconds\n", 58) ==
                      0,
                  "%s", csv);
    double acc[4];
    ck_assert_int_eq(csv_column(csv, "model", "rnn", "test_acc", acc, 4), 2);
    ck_assert_msg(acc[0] >= 0.9 && acc[1] >= 0.9, "rnn: %g %g", acc[0], acc[1]);
    ck_assert_int_eq(csv_column(csv, "model", "attention", "test_acc", acc, 4), 2);
    ck_assert_msg(acc[0] >= 0.95 && acc[1] >= 0.95, "attention: %g %g", acc[0], acc[1]);
    free(csv);
    snprintf(path, sizeof path, "%s/d/summary.csv", tmp);
    csv = slurp_path(path);
    ck_assert(strncmp(csv,
                      "model,distance,seeds,acc_mean,acc_sd,steps_to_90_mean,reached,diverged\n",
                      71) == 0);
    free(csv);
}
END_TEST

/* The held-out sentences were scored 128 at a time whatever --batch was:
 * at distance 1024 the attention's scores for 128 sentences of 1032
 * tokens took over 1 GB, at distance 4096 17 GB, with --batch 1 and one
 * step. The most memory the run takes (its peak resident size, as wait4
 * reports it) stays well under that now. */
START_TEST(test_distance_scores_long_sentences_in_small_batches)
{
    /* measured in a child of its own, whose only child is the run: its
     * RUSAGE_CHILDREN is then the run's alone, whatever ran before */
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        pid_t run_pid = fork();
        if (run_pid == 0) {
            int null = open("/dev/null", O_WRONLY);
            if (chdir(tmp) != 0 || null < 0 || dup2(null, 1) < 0)
                _exit(99);
            execl(QKV_BIN, "qkv", "distance", "--quiet", "--models", "attention", "--distances",
                  "1024", "--steps", "1", "--eval-every", "1", "--batch", "1", "--seeds", "1",
                  "--out", "d", (char *)NULL);
            _exit(98);
        }
        int status = -1;
        struct rusage ru;
        if (run_pid < 0 || waitpid(run_pid, &status, 0) != run_pid ||
            getrusage(RUSAGE_CHILDREN, &ru) != 0)
            _exit(97);
        char line[64];
        const int n = snprintf(line, sizeof line, "%d %ld", status, ru.ru_maxrss);
        _exit(write(fds[1], line, (size_t)n) == n ? 0 : 96);
    }
    close(fds[1]);
    char line[64] = "";
    const ssize_t got = read(fds[0], line, sizeof line - 1);
    close(fds[0]);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0 && got > 0, "status %d", status);
    int run_status;
    long maxrss;
    ck_assert_int_eq(sscanf(line, "%d %ld", &run_status, &maxrss), 2);
    ck_assert_msg(WIFEXITED(run_status) && WEXITSTATUS(run_status) == 0, "qkv: status %d",
                  run_status);
    ck_assert_msg(maxrss < 600 * 1024, "peak resident size %ld KB", maxrss); /* KB on Linux */
}
END_TEST

/* The runs in worker processes: the same tables, summary and runs (but
 * for their wall times) as one after another. */
START_TEST(test_distance_is_the_same_on_any_number_of_jobs)
{
    const char *args = "distance --quiet --models attention,rnn --distances 0,2 --steps 20 "
                       "--eval-every 5 --seeds 2 --out %s";
    char cmd[256], path[160], *o[2], *sum[2], *runs[2];
    for (int j = 0; j < 2; j++) {
        snprintf(cmd, sizeof cmd, args, j == 0 ? "a" : "b --jobs 2");
        ck_assert_int_eq(run(cmd, &o[j]), 0);
        *strstr(o[j], j == 0 ? "wrote a/" : "wrote b/") = '\0';
        snprintf(path, sizeof path, "%s/%s/summary.csv", tmp, j == 0 ? "a" : "b");
        sum[j] = slurp_path(path);
        snprintf(path, sizeof path, "%s/%s/runs.csv", tmp, j == 0 ? "a" : "b");
        runs[j] = slurp_path(path);
        for (char *line = runs[j]; (line = strchr(line, '\n')) != NULL; line++) {
            char *last = line; /* cut each row's last field, its seconds */
            while (last > runs[j] && last[-1] != ',' && last[-1] != '\n')
                last--;
            memmove(last, line, strlen(line) + 1);
            line = last;
        }
    }
    ck_assert_ptr_nonnull(strstr(o[0], "Test accuracy"));
    ck_assert_str_eq(o[0], o[1]);
    ck_assert_str_eq(sum[0], sum[1]);
    ck_assert_str_eq(runs[0], runs[1]);
    for (int j = 0; j < 2; j++) {
        free(o[j]);
        free(sum[j]);
        free(runs[j]);
    }
}
END_TEST

/* The steps-to-90% table: a cell is the mean steps_to_90 over the seeds
 * whose run reached 90% validation accuracy, followed by "(n/N)" when only
 * n of the N seeds did, and "-" when none did. Each cell is checked against
 * the rows of runs.csv. 30 steps leave attention short of 90% on two of
 * the four seeds at both distances. */
START_TEST(test_distance_steps_to_90_counts_the_seeds_that_got_there)
{
    static const char *models[] = {"attention", "rnn"};
    enum { SEEDS = 4, ND = 2 };
    char *out;
    int rc = run("distance --quiet --models attention,rnn --distances 0,2 --seeds 4 --steps 30 "
                 "--eval-every 5 --out d",
                 &out);
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, out);
    char path[160];
    snprintf(path, sizeof path, "%s/d/runs.csv", tmp);
    char *csv = slurp_path(path);
    const char *table = strstr(out, "Steps to 90% validation accuracy");
    ck_assert_msg(table != NULL, "%s", out);
    int partial = 0; /* cells where some seeds, not all, got there */
    for (int i = 0; i < 2; i++) {
        double dist[16], steps[16];
        int n = csv_column(csv, "model", models[i], "distance", dist, 16);
        ck_assert_int_eq(csv_column(csv, "model", models[i], "steps_to_90", steps, 16), n);
        char key[16];
        snprintf(key, sizeof key, "\n%s ", models[i]);
        const char *row = strstr(table, key);
        ck_assert_msg(row != NULL, "no %s row in\n%s", models[i], table);
        row++;
        ck_assert_msg(strcspn(row, "\n") == 18 + 12 * ND, "%s", table);
        for (int d = 0; d < ND; d++) {
            int seeds = 0, got = 0;
            double sum = 0;
            for (int r = 0; r < n; r++)
                if (dist[r] == 2 * d) {
                    seeds++;
                    if (steps[r] >= 0)
                        sum += steps[r], got++;
                }
            ck_assert_int_eq(seeds, SEEDS);
            /* the row: "%-10s %7s", then " %11s" per distance */
            char cell[12];
            memcpy(cell, row + 18 + 12 * d + 1, 11);
            cell[11] = '\0';
            const char *c = cell + strspn(cell, " ");
            if (got == 0) {
                ck_assert_msg(strcmp(c, "-") == 0, "%s at %d: '%s', none got there", models[i],
                              2 * d, c);
                continue;
            }
            double mean = -1;
            int k = -1, of = -1, f = sscanf(c, "%lf (%d/%d)", &mean, &k, &of);
            if (got < seeds) {
                partial++;
                ck_assert_msg(f == 3 && k == got && of == seeds, "%s at %d: '%s', expected (%d/%d)",
                              models[i], 2 * d, c, got, seeds);
            } else
                ck_assert_msg(f == 1 && strchr(c, '(') == NULL, "%s at %d: '%s', all got there",
                              models[i], 2 * d, c);
            ck_assert_msg(fabs(mean - sum / got) <= 0.5, "%s at %d: '%s', mean %g", models[i],
                          2 * d, c, sum / got);
        }
    }
    ck_assert_msg(partial > 0, "no cell has some seeds short of 90%%:\n%s", table);
    free(csv);
    free(out);
}
END_TEST

/* ablate's runs in worker processes: the same report and files, curves
 * included (each run's curve travels back with its result). */
START_TEST(test_ablate_is_the_same_on_any_number_of_jobs)
{
    const char *args = "ablate --quiet --variants full,no-v,bilinear --seeds 2 --steps 20 "
                       "--eval-every 5 --out %s";
    static const char *files[3] = {"runs.csv", "summary.csv", "curves.csv"};
    char cmd[256], path[160], *o[2], *f[2][3];
    for (int j = 0; j < 2; j++) {
        snprintf(cmd, sizeof cmd, args, j == 0 ? "a" : "b --jobs 2");
        ck_assert_int_eq(run(cmd, &o[j]), 0);
        *strstr(o[j], j == 0 ? "wrote a/" : "wrote b/") = '\0';
        for (int i = 0; i < 3; i++) {
            snprintf(path, sizeof path, "%s/%s/%s", tmp, j == 0 ? "a" : "b", files[i]);
            f[j][i] = slurp_path(path);
        }
    }
    ck_assert_str_eq(o[0], o[1]);
    for (int i = 0; i < 3; i++) {
        ck_assert_msg(strcmp(f[0][i], f[1][i]) == 0, "%s differs", files[i]);
        free(f[0][i]);
        free(f[1][i]);
    }
    free(o[0]);
    free(o[1]);
}
END_TEST

/* A run that the optimizer stopped: exit 1, and in its output head, then
 * the optimizer's account of the gradient (update = 0) or the update
 * (update = 1) of parameter name that is not finite, then the guidance
 * and tail. The value is a word, "NaN", "infinity" or "-infinity", which
 * of them as the kernels make it (it was printf's "inf", "nan" or
 * "-nan"). */
static void expect_stop(const char *args, const char *head, int update, const char *name,
                        const char *tail)
{
    char *out, want[160];
    const int rc = run(args, &out);
    ck_assert_msg(rc == 1, "qkv %s: exit %d, expected 1\n%s", args, rc, out);
    const char *at = strstr(out, head);
    ck_assert_msg(at != NULL, "qkv %s: output lacks '%s':\n%s", args, head, out);
    snprintf(want, sizeof want, "the %s of %s is not finite: %s[", update ? "update" : "gradient",
             name, update ? "data" : "grad");
    at = strstr(at + strlen(head), want);
    ck_assert_msg(at != NULL, "qkv %s: output lacks '%s' after '%s':\n%s", args, want, head, out);
    const char *value = strstr(at, "] = ");
    ck_assert_msg(value != NULL && (strncmp(value + 4, "NaN", 3) == 0 ||
                                    strncmp(value + 4, "infinity", 8) == 0 ||
                                    strncmp(value + 4, "-infinity", 9) == 0),
                  "qkv %s: not NaN or an infinity in words:\n%s", args, out);
    snprintf(want, sizeof want, "; %s (try a smaller --lr)%s",
             update ? "every parameter was updated" : "no parameter was changed", tail);
    ck_assert_msg(strstr(at, want) != NULL, "qkv %s: output lacks '%s':\n%s", args, want, out);
    free(out);
}

static void expect_refusal(const char *args, const char *head, const char *name, const char *tail)
{
    expect_stop(args, head, 0, name, tail);
}

/* A run whose step the optimizer refused says which gradient was not
 * finite, as qkv train does; it said "diverged at step 2 (try a smaller
 * --lr)" alone, as it still does for a loss that is not finite. no-v's
 * second step at these rates has a finite loss and an emb gradient that
 * is not (with the portable kernels too). */
START_TEST(test_ablate_names_the_gradient_the_optimizer_refused)
{
#ifdef QKV_DOUBLE
    const char *lr = "1e300";
#else
    const char *lr = "1e20";
#endif
    char args[200];
    snprintf(args, sizeof args,
             "ablate --task roles --quiet --variants no-v --seeds 1 --steps 6 --eval-every 2 "
             "--lr %s --out ab",
             lr);
    expect_refusal(args, "qkv: ablate: no-v, seed 1: diverged at step 2: ", "emb", "\n");
}
END_TEST

/* A run that fails in a worker process: the same one-line error, for
 * the first failing run in task order, on any number of jobs. Each
 * worker used to print its own failure, so --jobs 4 gave four lines in
 * an order that changed from run to run. */
START_TEST(test_ablate_fails_the_same_on_any_number_of_jobs)
{
#ifndef QKV_DOUBLE /* double has the range to keep these runs finite */
    const char *args = "ablate --quiet --lr 1e300 --steps 10 --seeds 2 --out %s";
    char cmd[256], *o[3];
    for (int j = 0; j < 3; j++) {
        snprintf(cmd, sizeof cmd, args, j == 0 ? "a" : j == 1 ? "b --jobs 2" : "c --jobs 4");
        ck_assert_int_eq(run(cmd, &o[j]), 1);
    }
    /* the first update overflows, which the optimizer refuses (it was
     * "diverged at step 2", the step whose loss was then not finite) */
    static const char head[] =
        "qkv: ablate: full, seed 1: diverged at step 1: the update of wq is not finite: data[";
    static const char tail[] =
        ", from finite gradients; every parameter was updated (try a smaller --lr)\n";
    ck_assert_msg(strncmp(o[0], head, strlen(head)) == 0 && strchr(o[0], '\n')[1] == '\0' &&
                      strstr(o[0], tail) != NULL,
                  "%s", o[0]);
    ck_assert_str_eq(o[1], o[0]);
    ck_assert_str_eq(o[2], o[0]);
    for (int j = 0; j < 3; j++)
        free(o[j]);
#endif
}
END_TEST

START_TEST(test_softmax_in_base_b_is_b_to_the_z_over_its_sum)
{
    /* by hand: 2^(1,2,3)/14 = (1,2,4)/7 and 10^(1,2,3)/1110 = (1,10,100)/111 */
    char *out;
    ck_assert_int_eq(run("softmax --base 2,10,e --csv sb.csv 1,2,3", &out), 0);
    ck_assert_msg(strstr(out, "2^z/Σ2^z") && strstr(out, "10^z/Σ10^z"), "%s", out);
    /* ∂p₃/∂z₃ = ln b·p₃(1 - p₃): e (e²/(e+e²+e³))(1 - ...) = 0.2227, ln 2·(4/7)(3/7) =
     * 0.1698, ln 10·(100/111)(11/111) = 0.2056, by the tape and by the formula */
    const char *at = strstr(out, "∂p/∂z at the largest z");
    ck_assert_msg(at != NULL, "%s", out);
    char grad[256]; /* the tape's row alone; the next row is the formula's */
    size_t len = strcspn(at, "\n");
    ck_assert_uint_lt(len, sizeof grad);
    memcpy(grad, at, len);
    grad[len] = '\0';
    char want[96];
    snprintf(want, sizeof want, "%.4f %12.4f %12.4f %12.4f", 0.2227, log(2) * 12 / 49,
             log(10) * 1100 / 12321, 0.2227);
    ck_assert_msg(strstr(grad, want) != NULL, "no '%s' in %s", want, grad);
    free(out);
    char path[160];
    snprintf(path, sizeof path, "%s/sb.csv", tmp);
    char *csv = slurp_path(path);
    double p2[3], p10[3], pe[3], soft[3];
    ck_assert_int_eq(csv_column(csv, NULL, NULL, "base_2", p2, 3), 3);
    ck_assert_int_eq(csv_column(csv, NULL, NULL, "base_10", p10, 3), 3);
    ck_assert_int_eq(csv_column(csv, NULL, NULL, "base_e", pe, 3), 3);
    ck_assert_int_eq(csv_column(csv, NULL, NULL, "softmax", soft, 3), 3);
    for (int i = 0; i < 3; i++) {
        ck_assert(fabs(p2[i] - (double)(1 << i) / 7) < 1e-5);
        ck_assert(fabs(p10[i] - pow(10, i) / 111) < 1e-5);
        ck_assert(pe[i] == soft[i]);
    }
    free(csv);
}
END_TEST

START_TEST(test_ablate_shared_qk_looks_at_itself_and_noself_stops_it)
{
    /* With Wk = Wq the score of a token with itself, |q|²/√d_k, is the
     * largest of its row unless training pushes it down: shared-qk puts
     * more weight on the pronoun itself than full does, on every seed, and
     * the mask takes it to 0. base-2-matched follows full's curve. */
    char *out;
    ck_assert_int_eq(run("ablate --quiet --variants full,shared-qk,shared-qk-noself,base-2-matched "
                         "--seeds 3 --steps 100 --out ab",
                         &out),
                     0);
    ck_assert_msg(strstr(out, "attn->self") && strstr(out, "base-2-matched"), "%s", out);
    free(out);
    char path[160];
    snprintf(path, sizeof path, "%s/ab/runs.csv", tmp);
    char *csv = slurp_path(path);
    double full[3], shared[3], noself[3], acc[3];
    ck_assert_int_eq(csv_column(csv, "variant", "full", "attn_self", full, 3), 3);
    ck_assert_int_eq(csv_column(csv, "variant", "shared-qk", "attn_self", shared, 3), 3);
    ck_assert_int_eq(csv_column(csv, "variant", "shared-qk-noself", "attn_self", noself, 3), 3);
    for (int s = 0; s < 3; s++) {
        ck_assert_msg(shared[s] > full[s] + 0.05, "seed %d: shared %g full %g", s, shared[s],
                      full[s]);
        ck_assert(noself[s] == 0);
    }
    ck_assert_int_eq(csv_column(csv, "variant", "full", "test_acc", acc, 3), 3);
    ck_assert(acc[0] >= 0.9 && acc[1] >= 0.9 && acc[2] >= 0.9);
    free(csv);
    snprintf(path, sizeof path, "%s/ab/curves.csv", tmp);
    csv = slurp_path(path);
    double a[30], b[30];
    ck_assert_int_eq(csv_column(csv, "variant", "full", "val_loss", a, 30), 30);
    ck_assert_int_eq(csv_column(csv, "variant", "base-2-matched", "val_loss", b, 30), 30);
    for (int i = 0; i < 30; i++) /* Adam's ε: a relative 1e-5 */
        ck_assert_msg(fabs(a[i] - b[i]) <= 1e-3 * a[i], "%d: %g vs %g", i, a[i], b[i]);
    free(csv);
}
END_TEST

/* Least-squares slope of ln y[j] against j, j = 1 .. n-1. */
static double fitted_slope(const double *y, int n)
{
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int j = 1; j < n; j++) {
        sx += j, sy += log(y[j]), sxx += (double)j * j, sxy += j * log(y[j]);
    }
    const int m = n - 1;
    return (m * sxy - sx * sy) / (m * sxx - sx * sx);
}

/* The display columns (a UTF-8 character is one) at which the cells of
 * one line of a table start: after the line's start or two spaces. A bar
 * between a cell's two halves ("a | b") starts no cell; where the bars
 * are goes to bars (up to max of them, their count to *nbars). */
static int cell_starts(const char *line, int *starts, int max, int *bars, int *nbars)
{
    int n = 0, col = 0, spaces = 2;
    *nbars = 0;
    for (const char *c = line; *c != '\0' && *c != '\n'; c++) {
        if (((unsigned char)*c & 0xC0) == 0x80)
            continue;
        if (*c == ' ')
            spaces++;
        else if (*c == '|') {
            if (*nbars < max)
                bars[(*nbars)++] = col;
            spaces = 0;
        } else {
            if (spaces >= 2 && n < max)
                starts[n++] = col;
            spaces = 0;
        }
        col++;
    }
    return n;
}

/* The summary tables' numbers keep their trailing zeros: "%.3g" wrote a
 * score variance of 1.20 as "1.2" beside "19.2", and 22800 as "2.28e+04".
 * Expected strings by hand. */
START_TEST(test_significant_digits_keep_trailing_zeros)
{
    static const struct {
        double x;
        int digits;
        const char *want;
    } cases[] = {
        {1.2, 3, "1.20"},
        {19.2, 3, "19.2"},
        {256, 3, "256"},
        {22800, 3, "22800"},
        {0.05, 3, "0.0500"},
        {0.001, 3, "0.00100"},
        {0, 3, "0"},
        {-0.0, 3, "0"},
        {-1.5, 3, "-1.50"},
        {9.996, 3, "10.0"},
        {0.09996, 3, "0.100"},
        {99999.5, 3, "1.00e+05"},
        {123456, 3, "1.23e+05"},
        {0.000999, 2, "0.0010"},
        {0.00099, 2, "9.9e-04"},
        {0.0099, 2, "0.0099"},
        {0.04, 2, "0.040"},
        {1, 1, "1"},
        {INFINITY, 3, "inf"},
        {-INFINITY, 3, "-inf"},
        {-NAN, 3, "nan"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[32];
        cli_format_sig(buf, sizeof buf, cases[i].x, cases[i].digits);
        ck_assert_msg(strcmp(buf, cases[i].want) == 0, "%.17g to %d digits: '%s', not '%s'",
                      cases[i].x, cases[i].digits, buf, cases[i].want);
    }
}
END_TEST

START_TEST(test_saturation_table_columns_line_up)
{
    /* the header gave each column 27 places, and a wider cell (the
     * Jacobian's "0.3093±0.0099 | 0.2813±0.025" at 3 seeds) pushed the
     * rest of its row to the right of the header; and within a column the
     * bars between scaled and unscaled wandered with the width of the
     * number before them ("114 | 114" over "89 | 2.28e+04") */
    static const char *cmds[] = {
        "saturation --quiet --dk 4,16 --seeds 3 --steps 2 --no-variance --out s",
        "saturation --quiet --dk 1,4,256 --init-std 3 --steps 2 --no-variance --out s"};
    static const int rows[] = {2, 3};
    for (int k = 0; k < 2; k++) {
        char *out;
        ck_assert_int_eq(run(cmds[k], &out), 0);
        const char *l = strstr(out, "\n  d_k");
        ck_assert_msg(l != NULL, "%s", out);
        int head[8], cells[8], bars[8], bars0[8], nb;
        ck_assert_int_eq(cell_starts(++l, head, 8, bars, &nb), 6);
        ck_assert_int_eq(nb, 0);
        for (int row = 0; row < rows[k]; row++) {
            l = strchr(l, '\n') + 1;
            ck_assert_int_eq(cell_starts(l, cells, 8, bars, &nb), 6);
            for (int i = 1; i < 6; i++)
                ck_assert_msg(cells[i] == head[i], "column %d of row %d starts at %d, not %d:\n%s",
                              i, row, cells[i], head[i], out);
            ck_assert_int_eq(nb, 5);
            for (int i = 0; i < 5; i++) {
                ck_assert_msg(bars[i] > cells[i + 1] && (i == 4 || bars[i] < cells[i + 2]),
                              "bar %d of row %d is outside its column:\n%s", i, row, out);
                ck_assert_msg(row == 0 || bars[i] == bars0[i],
                              "bar %d of row %d is at %d, not %d as above:\n%s", i, row, bars[i],
                              bars0[i], out);
                bars0[i] = bars[i];
            }
        }
        free(out);
    }
}
END_TEST

START_TEST(test_bptt_table_header_lines_up_with_its_rows)
{
    /* the header's "slope/ln rho" overran its 10 columns and ran into
     * "ln rho", and "‖g_p‖/‖g_1‖" was padded by bytes (‖ is 3 of them),
     * so the header ended 3 columns before the rows did */
    expect("bptt --quiet --rho 0.5 --length 16 --batch 2 --train-steps 0 --out b", 0,
           "\nmodel        act          rho        slope       ln rho slope/ln rho      "
           "‖g_p‖/‖g_1‖\n"
           "rnn          linear      0.50      -0.6931      -0.6931        1.000 ");
    /* and the lines above it say what g_j and the last column are (a
     * reader took ‖g_p‖ for the gradient at the pronoun) */
    expect("bptt --quiet --rho 0.5 --length 16 --batch 2 --train-steps 0 --out b", 0,
           "\n‖g_j‖ = ‖∂L/∂h_{p-j}‖: the gradient j steps back from the pronoun p = 12,\n"
           "in a sentence of 16 tokens; slope: least squares of ln‖g_j‖ over j = 1..12;\n"
           "‖g_p‖/‖g_1‖: at the first token's state against the state before the pronoun\n\n");
}
END_TEST

START_TEST(test_bptt_a_linear_recurrence_scales_the_gradient_by_rho_per_step)
{
    char *out;
    ck_assert_int_eq(
        run("bptt --quiet --rho 0.5,0.9,1.1,1.5 --length 32 --train-steps 0 --out b", &out), 0);
    free(out);
    /* rho = 1: ln rho is 0, and slope/ln rho has no value to print */
    ck_assert_int_eq(run("bptt --quiet --rho 1 --length 16 --train-steps 0 --out b1", &out), 0);
    ck_assert_msg(strstr(out, "nan") == NULL, "%s", out);
    free(out);
    char path[160];
    snprintf(path, sizeof path, "%s/b/grads.csv", tmp);
    char *csv = slurp_path(path);
    ck_assert(strncmp(csv, "model,rho,activation,steps_back,grad_norm\n", 42) == 0);
    /* the rows of each linear run, as the CSV gives them, fitted here */
    static const char *rhos[4] = {"0.5", "0.9", "1.1", "1.5"};
    char *lines = strdup(csv), *save = NULL;
    double y[4][64];
    int n[4] = {0};
    for (char *l = strtok_r(lines, "\n", &save); l != NULL; l = strtok_r(NULL, "\n", &save))
        for (int i = 0; i < 4; i++) {
            char prefix[32];
            snprintf(prefix, sizeof prefix, "rnn,%s,linear,", rhos[i]);
            if (strncmp(l, prefix, strlen(prefix)) == 0 && n[i] < 64)
                y[i][n[i]++] = atof(strrchr(l, ',') + 1);
        }
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(n[i], 29); /* j = 0 .. 28: the pronoun is at 32 - 4 */
        const double want = log(atof(rhos[i])), got = fitted_slope(y[i], n[i]);
        ck_assert_msg(fabs(got - want) <= 0.1 * fabs(want), "rho %s: slope %g, ln rho %g", rhos[i],
                      got, want);
    }
    free(lines);
    free(csv);
}
END_TEST

START_TEST(test_parallel_rnn_paths_grow_with_t_and_attentions_do_not)
{
    char *out;
    ck_assert_int_eq(run("parallel --quiet --models rnn,lstm,attention --lengths 16,32,48 "
                         "--threads 1 --min-time 0.001 --out p",
                         &out),
                     0);
    free(out);
    char path[160];
    snprintf(path, sizeof path, "%s/p/steps.csv", tmp);
    char *csv = slurp_path(path);
    double p[3];
    /* linear in T: equal steps from 16 to 32 to 48, and proportional */
    ck_assert_int_eq(csv_column(csv, "model", "rnn", "critical_path", p, 3), 3);
    ck_assert(p[1] - p[0] == p[2] - p[1] && p[1] - p[0] >= 16 && p[0] >= 16);
    /* as the READMEs count it: 3 nodes a token and 4 outside the recurrence */
    ck_assert_msg(p[0] == 3 * 16 + 4 && p[2] == 3 * 48 + 4, "%g %g", p[0], p[2]);
    ck_assert_int_eq(csv_column(csv, "model", "lstm", "critical_path", p, 3), 3);
    ck_assert(p[1] - p[0] == p[2] - p[1] && p[1] - p[0] >= 16);
    /* attention: the same short path at every length */
    ck_assert_int_eq(csv_column(csv, "model", "attention", "critical_path", p, 3), 3);
    ck_assert(p[0] == p[1] && p[1] == p[2] && p[0] <= 8);
    /* and as the READMEs give it: the fused attention node (the lookups,
     * the scores, the softmax and the pronoun's row of A·V), the output
     * layer's product and the loss, one after another */
    ck_assert_msg(p[0] == 3, "attention's critical path is %g", p[0]);
    free(csv);
}
END_TEST

START_TEST(test_resolve_lists_the_words_it_knows)
{
    /* a reader who tries a sentence of their own met "unknown word" with
     * no way to learn which words the model knows: --help lists them,
     * and the error points there */
    expect("resolve --help", 0,
           "Words the model knows (48):\n"
           "  names      小明 小刚 小强 小军 大伟 阿杰 (他)\n"
           "             小红 小丽 小芳 小美 小雪 阿珍 (她)\n"
           "  pronouns   他 她\n"
           "  others     是 个 运动达人 平时 很 爱 打 篮球 和 去 公园 喜欢 唱歌 跳舞 跑步\n"
           "             踢 足球 画画 看书 老师 学生 朋友 今天 说 因为 所以 的 ， 。 也\n"
           "             一起 昨天 同学 ！\n");
    expect("resolve \"小明很爱打排球，他\"", 1,
           "qkv: resolve: unknown word \"排球\" at character 5 "
           "('qkv resolve --help' lists the 48 words the model knows)\n");
    expect("resolve \"小明是个运动达人,他平时很爱打篮球\"", 1,
           "qkv: resolve: unknown word \",\" at character 8 (write the full-width \"，\"; "
           "'qkv resolve --help' lists the 48 words the model knows)\n");
}
END_TEST

/* A long path pushed the reason off the end of the library's 256-byte
 * message: "qkv: cannot open /tmp/.../aaaa" and nothing after it. The
 * start and the end of a long message are kept now, the middle elided. */
START_TEST(test_a_long_path_keeps_the_reason_in_the_message)
{
    char name[301], args[700];
    memset(name, 'a', sizeof name - 1);
    name[240] = '\0'; /* with ".safetensors", a name a directory entry can hold */
    snprintf(args, sizeof args, "eval --model %s.safetensors", name);
    expect(args, 1, "No such file or directory");
    expect(args, 1, "qkv: eval: cannot open ");
    /* a name longer than a directory entry may be */
    name[240] = 'a';
    name[sizeof name - 1] = '\0';
    snprintf(args, sizeof args, "train --quiet --steps 1 --save %s.safetensors --log a.csv", name);
    expect(args, 1, "File name too long");
    char *out;
    ck_assert_int_eq(run(args, &out), 1);
    ck_assert_msg(strchr(out, '\n') == out + strlen(out) - 1, "not one line:\n%s", out);
    free(out);
}
END_TEST

/* The model's loading errors name the command, as its other errors do
 * ("qkv: resolve: ..."): they said "qkv: no model at ...", "qkv: cannot
 * open ...", "qkv: d is a directory, not a file". */
START_TEST(test_resolve_without_a_model_says_to_train)
{
    expect("resolve \"他很爱唱歌\"", 1,
           "qkv: resolve: no model at out/coref.safetensors: run 'qkv train' first");
    expect("eval", 1, "qkv: eval: no model at out/coref.safetensors: run 'qkv train' first");
}
END_TEST

/* The default model's path, out/coref.safetensors, blocked by a file
 * called out or a link to nowhere: running qkv train, as the message
 * once said, failed too ("out exists and is not a directory", "... is
 * not a regular file (a symbolic link)"). The message says what is in
 * the way instead. */
START_TEST(test_a_default_model_blocked_by_a_file_is_not_missing)
{
    static const struct {
        const char *make, *says;
    } cases[] = {{"touch out", "Not a directory"},
                 {"mkdir out && ln -s nowhere out/coref.safetensors", "No such file or directory"}};
    static const char *cmds[] = {"eval", "resolve \"他很爱唱歌\""};
    char *out;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ck_assert_int_eq(sh(cases[c].make, &out), 0);
        free(out);
        for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
            ck_assert_int_eq(run(cmds[i], &out), 1);
            ck_assert_msg(strstr(out, "qkv train") == NULL && strstr(out, cases[c].says) != NULL &&
                              strstr(out, "out/coref.safetensors") != NULL,
                          "%s; qkv %s: %s", cases[c].make, cmds[i], out);
            free(out);
        }
        ck_assert_int_eq(sh("rm -r out", &out), 0);
        free(out);
    }
}
END_TEST

START_TEST(test_divergence_stops_and_keeps_the_last_checkpoint)
{
    char *out;
    ck_assert_int_eq(run("train --quiet --steps 20 --save good.safetensors --log a.csv", &out), 0);
    free(out);
    char path[128];
    size_t n1, n2;
    snprintf(path, sizeof path, "%s/good.safetensors", tmp);
    unsigned char *before = qkv_read_file(path, 1 << 20, &n1, NULL);
    expect("train --quiet --optim sgd --lr 1e30 --init-std 10 --save good.safetensors --log b.csv",
           1, "diverged at step");
    unsigned char *after = qkv_read_file(path, 1 << 20, &n2, NULL);
    ck_assert(before != NULL && after != NULL);
    ck_assert_uint_eq(n1, n2);
    ck_assert_int_eq(memcmp(before, after, n1), 0);
    free(before);
    free(after);
}
END_TEST

/* Reads a whole file into a string (caller frees). */
static char *slurp_path(const char *p)
{
    FILE *f = fopen(p, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", p);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *b = calloc((size_t)n + 1, 1);
    ck_assert_uint_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    return b;
}

START_TEST(test_saturation_is_deterministic_for_a_seed_and_any_thread_count)
{
    char *o1, *o2, path[160];
    /* run b on two threads: d_k = 512 gives the attention items enough
     * work to be split, and nothing may change */
    const char *args = "saturation --quiet --dk 4,512 --steps 12 --log-every 4 --out %s";
    char cmd[256];
    snprintf(cmd, sizeof cmd, args, "a");
    ck_assert_int_eq(run(cmd, &o1), 0);
    snprintf(cmd, sizeof cmd, args, "b --threads 2");
    ck_assert_int_eq(run(cmd, &o2), 0);
    ck_assert_ptr_nonnull(strstr(o1, "steps to 90% val"));
    ck_assert_ptr_nonnull(strstr(o1, "Var(q·k)"));
    /* the same tables, apart from the output directory they name */
    *strstr(o1, "wrote a/") = '\0';
    *strstr(o2, "wrote b/") = '\0';
    ck_assert_str_eq(o1, o2);
    snprintf(path, sizeof path, "%s/a/runs.csv", tmp);
    char *c1 = slurp_path(path);
    snprintf(path, sizeof path, "%s/b/runs.csv", tmp);
    char *c2 = slurp_path(path);
    ck_assert_str_eq(c1, c2);
    /* header + (2 d_k × scaled/unscaled × steps 0,4,8,11) rows */
    int lines = 0;
    for (char *p = c1; *p; p++)
        lines += *p == '\n';
    ck_assert_int_eq(lines, 1 + 2 * 2 * 4);
    ck_assert(strncmp(c1,
                      "d_k,scaled,seed,step,loss,acc,val_acc,gnorm_wq,gnorm_wk,gnorm_wv,"
                      "gnorm_scores,entropy,max_weight,jacobian,score_var\n",
                      100) == 0);
    /* the runs and the Var(q·k) table in 3 worker processes: the same */
    char *o3;
    snprintf(cmd, sizeof cmd, args, "c --jobs 3");
    ck_assert_int_eq(run(cmd, &o3), 0);
    *strstr(o3, "wrote c/") = '\0';
    ck_assert_str_eq(o1, o3);
    snprintf(path, sizeof path, "%s/c/runs.csv", tmp);
    char *c3 = slurp_path(path);
    ck_assert_str_eq(c1, c3);
    char *v1, *v3;
    snprintf(path, sizeof path, "%s/a/variance.csv", tmp);
    v1 = slurp_path(path);
    snprintf(path, sizeof path, "%s/c/variance.csv", tmp);
    v3 = slurp_path(path);
    ck_assert_str_eq(v1, v3);
    /* --no-variance: the same runs, no Var(q·k) table and no variance.csv */
    char *o4;
    snprintf(cmd, sizeof cmd, args, "d --no-variance");
    ck_assert_int_eq(run(cmd, &o4), 0);
    ck_assert_ptr_null(strstr(o4, "Var(q·k)"));
    ck_assert_ptr_nonnull(strstr(o4, "steps to 90% val"));
    snprintf(path, sizeof path, "%s/d/variance.csv", tmp);
    ck_assert_int_ne(access(path, F_OK), 0);
    snprintf(path, sizeof path, "%s/d/runs.csv", tmp);
    char *c4 = slurp_path(path);
    ck_assert_str_eq(c1, c4);
    free(o1);
    free(o2);
    free(o3);
    free(o4);
    free(c1);
    free(c2);
    free(c3);
    free(c4);
    free(v1);
    free(v3);
    expect("saturation --jobs 0", 2, "--jobs");
    expect("saturation --dk 4,x", 2, "--dk");
    expect("saturation --optim adamw", 2, "is not sgd or adam");
}
END_TEST

START_TEST(test_every_gnuplot_script_renders_a_png_from_fixtures)
{
    static const char *pngs[] = {"loss",     "saturation", "saturation_adam", "variance",
                                 "heatmap",  "softmax",    "distance",        "bptt",
                                 "parallel", "ablate",     "softmax_base"};
    char cmd[512], path[160];
    snprintf(cmd, sizeof cmd, "sh '%s/../../scripts/plots.sh' '%s/plots' '%s/png' >/dev/null 2>&1",
             QKV_TEST_DATA, QKV_TEST_DATA, tmp);
    ck_assert_msg(system(cmd) == 0, "plots.sh failed (is gnuplot installed? scripts/deps.sh)");
    for (size_t i = 0; i < sizeof pngs / sizeof pngs[0]; i++) {
        snprintf(path, sizeof path, "%s/png/%s.png", tmp, pngs[i]);
        FILE *f = fopen(path, "rb");
        ck_assert_msg(f != NULL, "no %s", path);
        unsigned char magic[8];
        ck_assert_uint_eq(fread(magic, 1, 8, f), 8);
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fclose(f);
        ck_assert_int_eq(memcmp(magic, "\x89PNG\r\n\x1a\n", 8), 0);
        ck_assert_int_gt(size, 10000); /* a drawn plot, not an empty canvas */
    }
    /* missing inputs are named and make the exit status 1; each hint's
     * command writes where the plot looks, not to its default out/ */
    char *out;
    snprintf(cmd, sizeof cmd, "mkdir -p empty && sh '%s/../../scripts/plots.sh' empty",
             QKV_TEST_DATA);
    ck_assert_int_eq(sh(cmd, &out), 1);
    ck_assert_msg(strstr(out, "skipped loss.png: missing empty/train.csv (make it with: build/qkv "
                              "train --log empty/train.csv)"),
                  "%s", out);
    ck_assert_msg(strstr(out, "skipped variance.png: missing empty/saturation/variance.csv (make "
                              "it with: build/qkv saturation --out empty/saturation)"),
                  "%s", out);
    free(out);
    /* named plots: those alone; a name that is no plot is refused */
    snprintf(cmd, sizeof cmd,
             "sh '%s/../../scripts/plots.sh' '%s/plots' some softmax_base variance 2>&1 && ls some",
             QKV_TEST_DATA, QKV_TEST_DATA);
    ck_assert_int_eq(sh(cmd, &out), 0);
    ck_assert_msg(strstr(out, "softmax_base.png\nvariance.png\n") != NULL &&
                      strstr(out, "loss.png") == NULL,
                  "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "sh '%s/../../scripts/plots.sh' '%s/plots' some loss lost",
             QKV_TEST_DATA, QKV_TEST_DATA);
    ck_assert_int_eq(sh(cmd, &out), 2);
    ck_assert_msg(strstr(out, "plots: no plot is called 'lost'"), "%s", out);
    free(out);
    /* a file where the plot directory goes: the script's own message */
    snprintf(cmd, sizeof cmd, "touch afile && sh '%s/../../scripts/plots.sh' '%s/plots' afile loss",
             QKV_TEST_DATA, QKV_TEST_DATA);
    ck_assert_int_eq(sh(cmd, &out), 1);
    ck_assert_msg(strstr(out, "plots: afile is a file, not a directory for the plots\n") == out,
                  "%s", out);
    free(out);
    /* what a plot not named would need is not asked for: ablate's curves
     * lacking softmax_base's variants do not fail a run drawing loss.png */
    snprintf(cmd, sizeof cmd,
             "mkdir -p part/ablate && cp '%s/plots/train.csv' part/ && "
             "head -n 2 '%s/plots/ablate/curves.csv' > part/ablate/curves.csv && "
             "sh '%s/../../scripts/plots.sh' part part/png loss",
             QKV_TEST_DATA, QKV_TEST_DATA, QKV_TEST_DATA);
    ck_assert_int_eq(sh(cmd, &out), 0);
    ck_assert_msg(strstr(out, "wrote part/png/loss.png") && !strstr(out, "skipped"), "%s", out);
    free(out);
}
END_TEST

/* make run's script (scripts/run.sh) with a stand-in for qkv whose bptt,
 * run beside the sweeps, fails: the run fails with bptt's status, and
 * leaves neither bptt's nor the early plots' output in the output
 * directory, nor its temporary directory (a failed run once left
 * out/plots.txt, which the next run printed as its own). */
START_TEST(test_make_runs_script_fails_with_a_background_jobs_status)
{
    char cmd[1024], *out;
    snprintf(
        cmd, sizeof cmd,
        "mkdir -p rt ro && printf '#!/bin/sh\\n[ \"$1\" = bptt ] && exit 3\\nexit 0\\n' > fq && "
        "chmod +x fq && TMPDIR=$PWD/rt JOBS=2 QKV=./fq OUT=ro "
        "sh '%s/../../scripts/run.sh' >/dev/null 2>&1; echo \"rc=$?\"; ls -A ro rt",
        QKV_TEST_DATA);
    ck_assert_int_eq(sh(cmd, &out), 0);
    ck_assert_msg(strncmp(out, "rc=3\n", 5) == 0, "%s", out);
    ck_assert_msg(strstr(out, ".txt") == NULL && strstr(out, "qkv-") == NULL, "%s", out);
    free(out);
}
END_TEST

/* make run's script interrupted (Ctrl-C sends SIGINT to the terminal's
 * whole process group): a stand-in qkv whose saturation, once bptt runs
 * beside it, sends SIGINT to its process group, which setsid makes the
 * script's own. The script exits 130, stops bptt (started in the
 * background, so SIGINT does not reach it) and removes its temporary
 * directory. */
START_TEST(test_make_runs_script_interrupted_stops_its_jobs_and_cleans_up)
{
    char cmd[2048], *out;
    snprintf(cmd, sizeof cmd,
             "mkdir -p it io && printf '#!/bin/sh\\ncase \"$1\" in\\n"
             "bptt) echo $$ >bptt.pid; exec sleep 20 ;;\\n"
             "saturation) i=0; while [ ! -s bptt.pid ] && [ $i -lt 500 ]; do sleep 0.01; "
             "i=$((i+1)); done; kill -INT 0; exec sleep 20 ;;\\nesac\\nexit 0\\n' >fi && "
             "chmod +x fi && TMPDIR=$PWD/it JOBS=2 QKV=./fi OUT=io "
             "setsid -w sh '%s/../../scripts/run.sh' >/dev/null 2>&1; echo \"rc=$?\"; "
             "i=0; while kill -0 \"$(cat bptt.pid)\" 2>/dev/null && [ $i -lt 100 ]; do "
             "sleep 0.01; i=$((i+1)); done; "
             "kill -0 \"$(cat bptt.pid)\" 2>/dev/null && { echo 'bptt alive'; "
             "kill \"$(cat bptt.pid)\"; }; ls -A io it",
             QKV_TEST_DATA);
    ck_assert_int_eq(sh(cmd, &out), 0);
    ck_assert_msg(strncmp(out, "rc=130\n", 7) == 0, "%s", out);
    ck_assert_msg(strstr(out, "alive") == NULL, "%s", out);
    ck_assert_msg(strstr(out, ".txt") == NULL && strstr(out, "qkv-") == NULL, "%s", out);
    free(out);
}
END_TEST

/* Splits text into lines with leading white space removed (in place). */
static int trimmed_lines(char *text, char **lines, int max)
{
    int n = 0;
    for (char *save = NULL, *l = strtok_r(text, "\n", &save); l && n < max;
         l = strtok_r(NULL, "\n", &save)) {
        while (*l == ' ' || *l == '\t')
            l++;
        lines[n++] = l;
    }
    return n;
}

/* Nonzero if the lines of block appear consecutively in file's lines. */
static int contains_block(char **file, int nf, char **block, int nb)
{
    for (int i = 0; i + nb <= nf; i++) {
        int j = 0;
        while (j < nb && strcmp(file[i + j], block[j]) == 0)
            j++;
        if (j == nb)
            return 1;
    }
    return 0;
}

START_TEST(test_readme_c_snippets_are_compiled_example_code)
{
    enum { MAX_EX = 16, MAX_LINES = 600 };
    static char *file_lines[MAX_EX][MAX_LINES], *block_lines[100];
    char path[512], *text[MAX_EX];
    int nf[MAX_EX], n_ex = 0, blocks = 0;
    snprintf(path, sizeof path, "%s/../../examples", QKV_TEST_DATA);
    DIR *dir = opendir(path);
    ck_assert_ptr_nonnull(dir);
    for (struct dirent *e; (e = readdir(dir)) != NULL;) {
        size_t len = strlen(e->d_name);
        if (len < 3 || strcmp(e->d_name + len - 2, ".c") != 0)
            continue;
        ck_assert_int_lt(n_ex, MAX_EX);
        snprintf(path, sizeof path, "%s/../../examples/%s", QKV_TEST_DATA, e->d_name);
        text[n_ex] = slurp_path(path);
        nf[n_ex] = trimmed_lines(text[n_ex], file_lines[n_ex], MAX_LINES);
        n_ex++;
    }
    closedir(dir);
    for (int doc = 0; doc < 2; doc++) { /* the guide for the tutorial's readers too */
        snprintf(path, sizeof path, "%s/../../%s", QKV_TEST_DATA,
                 doc ? "README.zh-CN.md" : "README.md");
        char *readme = slurp_path(path);
        for (char *p = strstr(readme, "```c\n"); p != NULL; p = strstr(p, "```c\n")) {
            char *body = p + 5, *end = strstr(body, "```");
            ck_assert_ptr_nonnull(end);
            *end = '\0';
            int nb = trimmed_lines(body, block_lines, 100), found = 0;
            for (int e = 0; e < n_ex && !found; e++)
                found = contains_block(file_lines[e], nf[e], block_lines, nb);
            ck_assert_msg(found, "%s: the block starting '%s' is not in examples/", path,
                          block_lines[0]);
            blocks++;
            p = end + 1;
        }
        ck_assert_int_ge(blocks, doc ? 1 : 3);
        free(readme);
        blocks = 0;
    }
    for (int e = 0; e < n_ex; e++)
        free(text[e]);
}
END_TEST

/* make install installs the library, not the apps (include/apps/,
 * libqkvapps.a): an example that includes an apps/ header builds only in
 * the source tree, and nothing said so. README's section on using the
 * installed library names each such example and says why. */
START_TEST(test_readme_says_which_examples_build_only_in_the_source_tree)
{
    char path[512];
    snprintf(path, sizeof path, "%s/../../README.md", QKV_TEST_DATA);
    char *readme = slurp_path(path);
    char *section = strstr(readme, "### Using the library in your own program\n");
    ck_assert_ptr_nonnull(section);
    char *end = strstr(section + 4, "\n## ");
    if (end != NULL)
        *end = '\0';
    ck_assert_ptr_nonnull(strstr(section, "source tree"));
    snprintf(path, sizeof path, "%s/../../examples", QKV_TEST_DATA);
    DIR *dir = opendir(path);
    ck_assert_ptr_nonnull(dir);
    int apps = 0;
    for (struct dirent *e; (e = readdir(dir)) != NULL;) {
        const size_t len = strlen(e->d_name);
        if (len < 3 || strcmp(e->d_name + len - 2, ".c") != 0)
            continue;
        snprintf(path, sizeof path, "%s/../../examples/%s", QKV_TEST_DATA, e->d_name);
        char *text = slurp_path(path), name[300];
        if (strstr(text, "#include \"apps/") != NULL) {
            snprintf(name, sizeof name, "`examples/%s`", e->d_name);
            ck_assert_msg(strstr(section, name) != NULL,
                          "%s includes an apps/ header, which make install does not install; "
                          "README's 'Using the library in your own program' does not say so",
                          e->d_name);
            apps++;
        }
        free(text);
    }
    closedir(dir);
    ck_assert_int_ge(apps, 1); /* train_coref.c */
    free(readme);
}
END_TEST

START_TEST(test_csv_create_makes_directories_and_writes_the_header)
{
    char p[160], line[64];
    qkv_error err = qkv_error_none();
    snprintf(p, sizeof p, "%s/a/b/log.csv", tmp);
    FILE *f = cli_csv_create(p, "step,loss", &err);
    ck_assert_ptr_nonnull(f);
    fprintf(f, "1,0.5\n");
    fflush(f);
    /* written beside its name until it is whole */
    ck_assert_int_ne(access(p, F_OK), 0);
    ck_assert_int_eq(cli_csv_close(f, p), 0);
    f = fopen(p, "r");
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
    ck_assert_str_eq(line, "step,loss\n");
    fclose(f);
    /* a file where a directory should be */
    snprintf(p, sizeof p, "%s/a/b/log.csv/x.csv", tmp);
    ck_assert_ptr_null(cli_csv_create(p, "h", &err));
    ck_assert_int_eq(err.status, QKV_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err.message, "not a directory"));
    /* a table that ends badly leaves the last whole one, and its mode */
    snprintf(p, sizeof p, "%s/a/b/log.csv", tmp);
    ck_assert_int_eq(chmod(p, 0640), 0);
    f = cli_csv_create(p, "step,loss", &err);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(cli_csv_end(f, p, 0), -1);
    char *kept = slurp_path(p);
    ck_assert_str_eq(kept, "step,loss\n1,0.5\n");
    free(kept);
    f = cli_csv_create(p, "step,acc", &err);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(cli_csv_close(f, p), 0);
    kept = slurp_path(p);
    ck_assert_str_eq(kept, "step,acc\n");
    free(kept);
    struct stat sb;
    ck_assert_int_eq(stat(p, &sb), 0);
    ck_assert_int_eq(sb.st_mode & 0777, 0640);
    char cmd[200], *out;
    snprintf(cmd, sizeof cmd, "ls -A '%s/a/b'", tmp);
    ck_assert_int_eq(sh(cmd, &out), 0);
    ck_assert_str_eq(out, "log.csv\n");
    free(out);
}
END_TEST

START_TEST(test_a_program_built_for_the_other_scalar_type_fails_clearly)
{
    /* examples/quickstart.c compiled with the other setting of QKV_DOUBLE,
     * linked to this build's library: a clear message and exit 1, never
     * floats read as doubles */
    char cmd[1024], lib[512], *out;
    snprintf(lib, sizeof lib, "%s", QKV_BIN);
    *strrchr(lib, '/') = '\0'; /* the build directory */
    snprintf(cmd, sizeof cmd,
             "cc -std=c11 %s %s -I'%s/../../include' '%s/../../examples/quickstart.c' "
             "'%s/libqkv.a' -lm -pthread -o other && ./other",
             sizeof(qkv_real) == 4 ? "-DQKV_DOUBLE" : "", QKV_LDSAN, QKV_TEST_DATA, QKV_TEST_DATA,
             lib);
    ck_assert_int_eq(sh(cmd, &out), 1);
    ck_assert_msg(strstr(out, sizeof(qkv_real) == 4 ? "compiled for double qkv but is linked to "
                                                      "the float32 build"
                                                    : "compiled for float32 qkv but is linked to "
                                                      "the double build"),
                  "%s", out);
    free(out);
}
END_TEST

START_TEST(test_plots_read_columns_by_header_name)
{
    /* the same CSV with its columns in another order draws the same PNG */
    char cmd[1024], a[256], b[256];
    snprintf(cmd, sizeof cmd,
             "mkdir -p one two && cp '%s/plots/train.csv' one/ && "
             "awk -F, -v OFS=, '{ print $6, $3, $1, $5, $2, $4, $10, $9, $8, $7 }' "
             "'%s/plots/train.csv' > two/train.csv && "
             "sh '%s/../../scripts/plots.sh' one one/png >/dev/null 2>&1; "
             "sh '%s/../../scripts/plots.sh' two two/png >/dev/null 2>&1; true",
             QKV_TEST_DATA, QKV_TEST_DATA, QKV_TEST_DATA, QKV_TEST_DATA);
    char *out;
    ck_assert_int_eq(sh(cmd, &out), 0);
    free(out);
    snprintf(a, sizeof a, "%s/one/png/loss.png", tmp);
    snprintf(b, sizeof b, "%s/two/png/loss.png", tmp);
    char *pa = slurp_path(a), *pb = slurp_path(b);
    ck_assert(memcmp(pa, "\x89PNG", 4) == 0);
    snprintf(cmd, sizeof cmd, "cmp -s one/png/loss.png two/png/loss.png");
    ck_assert_int_eq(sh(cmd, &out), 0);
    free(out);
    free(pa);
    free(pb);
}
END_TEST

/* Runs build/examples/NAME and expects exit 0 and a part of its output. */
static void expect_example(const char *name, const char *part)
{
    char cmd[600], dir[512], *out;
    snprintf(dir, sizeof dir, "%s", QKV_BIN);
    *strrchr(dir, '/') = '\0';
    snprintf(cmd, sizeof cmd, "'%s/examples/%s'", dir, name);
    int rc = sh(cmd, &out);
    ck_assert_msg(rc == 0, "%s: exit %d\n%s", name, rc, out);
    ck_assert_msg(strstr(out, part) != NULL, "%s: output lacks '%s':\n%s", name, part, out);
    free(out);
}

START_TEST(test_every_example_runs_to_its_result)
{
    /* q = (1,0), K = ((1,0),(0,1),(-1,0)), scaled by 1/√2: scores
     * (0.7071, 0, -0.7071); softmax (0.5760, 0.2840, 0.1400) by hand, and
     * loss -ln 0.5760 = 0.5517 */
    expect_example("quickstart", "attention: 0.5760 0.2840 0.1400\nloss: 0.5517");
    expect_example("custom_op", "(pass)");
    expect_example("train_coref", "他 → 小明");
    /* XOR: all four right; least squares: the normal equations' answer;
     * multi-head attention: the previous token, on fresh sequences; and no
     * heap allocation in any step after the first */
    expect_example("xor_mlp", "4 of 4 correct\nheap allocations in steps 2 to 400: 0");
    expect_example("least_squares", "heap allocations in steps 2 to 600: 0");
    expect_example("mha", "previous-token accuracy on fresh sequences: 1.0000");
    expect_example("mha", "heap allocations in steps 2 to 500: 0");
    /* padded sequences: the last digit's parity, found with the padding
     * mask (its exit status: at least 95%, and below 80% with the padding
     * left visible, which shows what the mask does) */
    expect_example("padding", "padding masked: 1.0000");
    expect_example("padding", "heap allocations in steps 2 to 600: 0");
    /* the character model recites its 62-character text from the first
     * character, exactly */
    expect_example("char_lm", "the text, exactly (62 of 62 characters right from the start)\n"
                              "heap allocations in steps 2 to 300: 0");
    /* the Transformer sorts at least 90% of fresh sequences exactly (its
     * exit status), and the model reloaded from safetensors sorts them
     * exactly as the trained one; its weights go to a temporary file (in
     * $TMPDIR), removed at the end: it wrote transformer.safetensors
     * into the directory it was run from */
    char cmd[600], dir[512], *out;
    snprintf(dir, sizeof dir, "%s", QKV_BIN);
    *strrchr(dir, '/') = '\0';
    snprintf(cmd, sizeof cmd, "mkdir tdir && TMPDIR=\"$PWD/tdir\" '%s/examples/transformer'", dir);
    ck_assert_int_eq(sh(cmd, &out), 0);
    char want[200];
    snprintf(want, sizeof want, "reloaded from %s/tdir/transformer.", tmp);
    ck_assert_msg(strstr(out, want) != NULL, "%s", out);
    ck_assert_msg(strstr(out, ": the same predictions\nheap allocations in steps 2 to 800: 0"),
                  "%s", out);
    free(out);
    /* a run stopped and resumed from its weights and optimizer state
     * ends with the straight run's weights, bit for bit, and one resumed
     * from the weights alone does not; both files go to a directory of
     * its own in $TMPDIR, removed at the end */
    snprintf(cmd, sizeof cmd, "TMPDIR=\"$PWD/tdir\" '%s/examples/resume'", dir);
    ck_assert_int_eq(sh(cmd, &out), 0);
    ck_assert_msg(strstr(out, "resumed at step 80, lr 0.00781767\n"
                              "weights and optimizer state: the same bits\n"
                              "weights alone:               differ\n") == out,
                  "%s", out);
    free(out);
    /* no example leaves a file behind, here or in $TMPDIR */
    ck_assert_int_eq(sh("ls -A . tdir", &out), 0);
    ck_assert_str_eq(out, ".:\ntdir\n\ntdir:\n");
    free(out);
    /* a path given keeps the weights there; the name is shown with its
     * control character escaped (it was printed raw), its Chinese as it is */
    snprintf(cmd, sizeof cmd, "'%s/examples/transformer' \"$(printf '权重\\033.st')\"", dir);
    ck_assert_int_eq(sh(cmd, &out), 0);
    ck_assert_msg(strstr(out, "reloaded from 权重\\x1b.st: the same predictions\n"), "%s", out);
    free(out);
    ck_assert_int_eq(sh("test -s \"$(printf '权重\\033.st')\"", &out), 0);
    free(out);
    /* its one argument is a path: --help is not taken for one, and
     * another option is refused before any training (exit 2) */
    snprintf(cmd, sizeof cmd, "'%s/examples/transformer' --help", dir);
    ck_assert_int_eq(sh(cmd, &out), 0);
    ck_assert_msg(strstr(out, "usage: transformer [WEIGHTS]") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "a temporary file, removed at the end") != NULL, "%s", out);
    free(out);
    /* --help first answers whatever follows, as every other example does */
    snprintf(cmd, sizeof cmd, "'%s/examples/transformer' --help extra", dir);
    ck_assert_int_eq(sh(cmd, &out), 0);
    ck_assert_msg(strstr(out, "usage: transformer [WEIGHTS]") == out, "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "'%s/examples/transformer' --bogus", dir);
    ck_assert_int_eq(sh(cmd, &out), 2);
    ck_assert_msg(strstr(out, "usage: transformer") != NULL && strstr(out, "step") == NULL, "%s",
                  out);
    /* the first line names what was wrong, then the usage */
    ck_assert_msg(strstr(out, "transformer: unknown option '--bogus'\nusage: ") == out, "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "'%s/examples/transformer' \"$(printf -- '-\\033[2J\\377')\"", dir);
    ck_assert_int_eq(sh(cmd, &out), 2);
    ck_assert_msg(strstr(out, "transformer: unknown option '-\\x1b[2J\\xff'\nusage: ") == out, "%s",
                  out);
    free(out);
    snprintf(cmd, sizeof cmd, "'%s/examples/transformer' -", dir);
    ck_assert_int_eq(sh(cmd, &out), 2);
    ck_assert_msg(strstr(out, "transformer: '-' is not standard output here; write ./- for a "
                              "file named '-'\nusage: ") == out,
                  "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "'%s/examples/transformer' a.st b.st", dir);
    ck_assert_int_eq(sh(cmd, &out), 2);
    ck_assert_msg(strstr(out, "transformer: one WEIGHTS file at most, not 2 arguments\nusage: ") ==
                      out,
                  "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s/--help", tmp); /* no file of that name was written */
    ck_assert_int_ne(access(cmd, F_OK), 0);
}
END_TEST

/* The examples that take no argument were main(void): `mha --help`
 * trained 500 steps and exited 0, `xor_mlp foo` ignored foo. --help or -h
 * prints the usage to stdout (exit 0); anything else is named on a first
 * line, the usage after it, on stderr (exit 2); neither trains. An
 * argument echoed back is escaped as qkv escapes it (qkv_escape): a
 * control character and a byte of invalid UTF-8 as \xNN, a C1 control or
 * an invisible character as \u{XXXX}, and Chinese as it is. */
START_TEST(test_examples_without_arguments_refuse_one_and_explain_on_help)
{
    static const char *names[] = {"quickstart", "custom_op",     "train_coref",
                                  "xor_mlp",    "least_squares", "mha",
                                  "char_lm",    "resume",        "padding"};
    char dir[512], cmd[1024], want[256], *out;
    snprintf(dir, sizeof dir, "%s", QKV_BIN);
    *strrchr(dir, '/') = '\0';
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *name = names[i];
        for (int h = 0; h < 2; h++) { /* the usage on stdout alone, stderr dropped */
            snprintf(cmd, sizeof cmd, "('%s/examples/%s' %s 2>/dev/null)", dir, name,
                     h ? "-h" : "--help");
            int rc = sh(cmd, &out);
            snprintf(want, sizeof want, "usage: %s\n", name);
            ck_assert_msg(rc == 0 && strstr(out, want) == out, "%s --help: exit %d\n%s", name, rc,
                          out);
            ck_assert_msg(strstr(out, "takes no arguments") != NULL, "%s --help:\n%s", name, out);
            int lines = 0; /* the usage alone: no training's output after it */
            for (const char *c = out; *c != '\0'; c++)
                lines += *c == '\n';
            ck_assert_msg(lines <= 4, "%s --help: %d lines\n%s", name, lines, out);
            free(out);
        }
        static const struct {
            const char *arg, *shown;
        } bad[] = {
            {"foo", "foo"},
            {"--bogus", "--bogus"},
            {"foo --help", "foo"},
            {"\"$(printf 'a\\033[2Jb\\377')\"", "a\\x1b[2Jb\\xff"},
            {"\"$(printf 'x\\302\\233y')\"", "x\\u{9b}y"},        /* C1 CSI, U+009B */
            {"\"$(printf 'x\\342\\200\\213y')\"", "x\\u{200b}y"}, /* zero width */
            {"中文", "中文"},
        };
        for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) { /* stderr alone */
            snprintf(cmd, sizeof cmd, "('%s/examples/%s' %s 2>&1 >/dev/null)", dir, name,
                     bad[b].arg);
            int rc = sh(cmd, &out);
            snprintf(want, sizeof want, "%s: unexpected argument '%s'\nusage: %s\n", name,
                     bad[b].shown, name);
            ck_assert_msg(rc == 2 && strstr(out, want) == out, "%s %s: exit %d\n%s", name,
                          bad[b].arg, rc, out);
            free(out);
        }
    }
}
END_TEST

/* The Transformer example checked where it saves its weights only after
 * training 800 steps, and then failed: a path it cannot write is now
 * refused first, with one line. As for qkv train --save: a name that is
 * wrong as written (empty, or a directory by its spelling: "sub/", ".")
 * is a usage error, exit 2; a path the file system refuses (a directory
 * there, a missing directory, /proc, a link) is a failure, exit 1, as is
 * a $TMPDIR that takes no file. */
START_TEST(test_transformer_checks_its_weights_path_before_it_trains)
{
    static const struct {
        const char *args, *says;
        int rc;
    } cases[] = {
        {"/proc/x.st", "transformer: cannot save to /proc/x.st: ", 1},
        {"sub", "transformer: cannot save to sub: it is a directory", 1},
        {"sub/", "transformer: WEIGHTS 'sub/' names a directory, not a file", 2},
        {".", "transformer: WEIGHTS '.' names a directory, not a file", 2},
        {"sub/..", "transformer: WEIGHTS 'sub/..' names a directory, not a file", 2},
        {"nodir/w.st", "transformer: cannot save to nodir/w.st: No such file or directory", 1},
        {"link.st", "transformer: cannot save to link.st: it is not a regular file", 1},
        {"''", "transformer: WEIGHTS is empty", 2},
        /* a control character or invalid UTF-8 in the name is escaped,
         * as qkv escapes it; Chinese is shown as it is */
        {"\"$(printf 'd\\033[2J/')\"", "transformer: WEIGHTS 'd\\x1b[2J/' names a directory", 2},
        {"\"$(printf 'no\\377dir/w\\tst')\"",
         "transformer: cannot save to no\\xffdir/w\\x09st: No such file or directory", 1},
        {"目录/", "transformer: WEIGHTS '目录/' names a directory, not a file", 2},
    };
    char dir[512], cmd[1024], *out;
    snprintf(dir, sizeof dir, "%s", QKV_BIN);
    *strrchr(dir, '/') = '\0';
    ck_assert_int_eq(sh("mkdir sub && ln -s sub/w.st link.st", &out), 0);
    free(out);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(cmd, sizeof cmd, "'%s/examples/transformer' %s", dir, cases[i].args);
        int rc = sh(cmd, &out);
        ck_assert_msg(rc == cases[i].rc, "transformer %s: exit %d\n%s", cases[i].args, rc, out);
        ck_assert_msg(strstr(out, cases[i].says) == out && strchr(out, '\n') == strrchr(out, '\n'),
                      "transformer %s: not one line '%s...':\n%s", cases[i].args, cases[i].says,
                      out);
        free(out);
    }
    /* a name that fits (253 bytes) but not as the save's temporary file
     * beside it (.NAME.XXXXXX, 261): the file system's refusal, found
     * before the training */
    char name[251], want[400];
    memset(name, 'w', sizeof name - 1);
    name[250] = '\0';
    snprintf(cmd, sizeof cmd, "'%s/examples/transformer' %s.st", dir, name);
    snprintf(want, sizeof want, "transformer: cannot save to %s.st: File name too long\n", name);
    ck_assert_int_eq(sh(cmd, &out), 1);
    ck_assert_str_eq(out, want);
    free(out);
    snprintf(cmd, sizeof cmd, "TMPDIR=/proc '%s/examples/transformer'", dir);
    ck_assert_int_eq(sh(cmd, &out), 1);
    ck_assert_msg(strstr(out, "transformer: cannot save to a temporary file in /proc: ") == out &&
                      strstr(out, "step") == NULL,
                  "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "TMPDIR=\"$(printf '/proc/\\033')\" '%s/examples/transformer'", dir);
    ck_assert_int_eq(sh(cmd, &out), 1);
    ck_assert_msg(strstr(out, "transformer: cannot save to a temporary file in /proc/\\x1b: ") ==
                      out,
                  "%s", out);
    free(out);
    /* nothing was made: no probe file left, sub still empty */
    ck_assert_int_eq(sh("ls -A . sub", &out), 0);
    ck_assert_str_eq(out, ".:\nlink.st\nsub\n\nsub:\n");
    free(out);
}
END_TEST

START_TEST(test_a_full_stdout_is_a_failure)
{
    /* every command whose output cannot be written exits non-zero */
    static const char *cmds[] = {
        "demo",
        "softmax",
        "gradcheck",
        "--help",
        "demo --help",
        "train --quiet --steps 2 --save m.safetensors --log l.csv",
        "eval --model m.safetensors",
        "resolve --model m.safetensors \"小明是个运动达人，他平时很爱打篮球\"",
        "saturation --quiet --dk 4 --steps 2 --out sat"};
    char cmd[900], *out;
    ck_assert_int_eq(run("train --quiet --steps 2 --save m.safetensors --log l.csv", &out), 0);
    free(out);
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        snprintf(cmd, sizeof cmd, "'%s' %s 2>err.txt >/dev/full; rc=$?; cat err.txt; exit $rc",
                 QKV_BIN, cmds[i]);
        int rc = sh(cmd, &out);
        ck_assert_msg(rc == 1, "qkv %s >/dev/full: exit %d\n%s", cmds[i], rc, out);
        ck_assert_msg(strstr(out, "cannot write the output: No space left on device"), "%s", out);
        free(out);
    }
}
END_TEST

START_TEST(test_plots_on_a_full_disk_fail)
{
    /* a file size limit makes writes fail with EFBIG, as a full disk does;
     * gnuplot then writes a truncated PNG and exits 0, which plots.sh must
     * notice */
    char cmd[512], *out;
    snprintf(cmd, sizeof cmd,
             "ulimit -f 20; trap '' XFSZ; sh '%s/../../scripts/plots.sh' '%s/plots' png",
             QKV_TEST_DATA, QKV_TEST_DATA);
    ck_assert_int_eq(sh(cmd, &out), 1);
    ck_assert_msg(strstr(out, "png/loss.png is incomplete"), "%s", out);
    ck_assert_msg(strstr(out, "wrote png/loss.png") == NULL, "%s", out);
    free(out);
}
END_TEST

START_TEST(test_plots_interrupted_leave_no_png_cut_short)
{
    /* Ctrl-C while gnuplot was writing left png/loss.png cut short (in
     * place of the last whole one), which a viewer shows as broken. A
     * stand-in gnuplot writes part of its output file, then the group
     * gets SIGINT, as from a terminal. */
    char cmd[1536], *out;
    snprintf(cmd, sizeof cmd,
             "mkdir -p d png bin && cp '%s/plots/train.csv' d/ && echo old >png/loss.png && "
             "printf '#!/bin/sh\\nq=\\\\\\047\\nout=${2#*outfile=$q}\\nout=${out%%%%$q*}\\n"
             "printf cut >\"$out\"\\nkill -INT 0\\nexec sleep 20\\n' >bin/gnuplot && "
             "chmod +x bin/gnuplot && PATH=\"$PWD/bin:$PATH\" "
             "setsid -w sh '%s/../../scripts/plots.sh' d png loss >/dev/null 2>&1; "
             "echo \"rc=$?\"; ls -A png; cat png/loss.png",
             QKV_TEST_DATA, QKV_TEST_DATA);
    ck_assert_int_eq(sh(cmd, &out), 0);
    ck_assert_str_eq(out, "rc=130\nloss.png\nold\n");
    free(out);
}
END_TEST

START_TEST(test_a_csv_cut_short_by_a_full_disk_is_removed)
{
    /* each run fills more than the 512 bytes that ulimit -f 1 allows: the
     * command fails, and leaves no truncated CSV for a plot to read */
    const char *cmds[][2] = {
        {"saturation --dk 4,16 --steps 20 --log-every 1 --no-variance --quiet --out o",
         "o/runs.csv"},
        {"bptt --rho 0.5,1 --length 16 --train-steps 2 --quiet --out o", "o/grads.csv"},
        {"ablate --variants full,no-v --seeds 1 --steps 20 --eval-every 1 --quiet --out o",
         "o/curves.csv"},
        {"resolve --model m.st --csv o/r.csv 小红和阿杰是朋友，他爱打篮球，她喜欢唱歌", "o/r.csv"},
    };
    char *out, cmd[1024];
    ck_assert_int_eq(run("train --steps 2 --quiet --log t.csv --save m.st", &out), 0);
    free(out);
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        snprintf(cmd, sizeof cmd,
                 "rm -rf o; (ulimit -f 1; trap '' XFSZ; '%s' %s 2>&1 >/dev/null); rc=$?; "
                 "if test -e %s; then echo left behind; fi; exit $rc",
                 QKV_BIN, cmds[i][0], cmds[i][1]);
        int rc = sh(cmd, &out);
        ck_assert_msg(rc == 1, "qkv %s: exit %d\n%s", cmds[i][0], rc, out);
        ck_assert_msg(strstr(out, "cannot write") != NULL, "%s", out);
        ck_assert_msg(strstr(out, "left behind") == NULL, "qkv %s: %s\n%s", cmds[i][0], cmds[i][1],
                      out);
        free(out);
    }
    /* but a device that refuses the bytes is no CSV of ours to remove,
     * nor is a link to one (mknod needs root: then a node of /dev/full) */
    const char *devs = "ln -s /dev/full link && { mknod -m 666 full c 1 7 2>/dev/null || "
                       "ln -s /dev/full full; }";
    ck_assert_int_eq(sh(devs, &out), 0);
    free(out);
    /* with the reason, which the message left out */
    expect("softmax --csv full", 1, "qkv: softmax: cannot write full: No space left on device");
    expect("softmax --csv link", 1, "qkv: softmax: cannot write link: No space left on device");
    ck_assert_int_eq(sh("test -c full || test -L full", &out), 0);
    free(out);
    ck_assert_int_eq(sh("test -L link", &out), 0);
    free(out);
}
END_TEST

/* A write that failed for a file size limit (EFBIG, as a full disk's
 * ENOSPC) was reported at the close as "Input/output error" when the
 * stream held nothing more to write: fclose then fails for no reason of
 * its own. saturation's runs.csv said so, and train's log gave no reason
 * at all ("cannot finish writing t.csv.part"). The first failed write's
 * reason is the one reported, and train names its log. */
START_TEST(test_a_csv_write_failure_gives_the_first_failures_reason)
{
    const char *cmds[][2] = {
        {"saturation --dk 4,16 --steps 20 --log-every 1 --no-variance --quiet --out o",
         "saturation: cannot write o/runs.csv"},
        {"train --quiet --steps 200 --log-every 1 --log o/t.csv --save o/m.st",
         "train: cannot write o/t.csv"},
        {"bptt --rho 0.5,1 --length 16 --train-steps 2 --quiet --out o",
         "bptt: cannot write o/grads.csv"},
        {"resolve --model m.st --csv o/r.csv 小红和阿杰是朋友，他爱打篮球，她喜欢唱歌",
         "resolve: cannot write o/r.csv"},
    };
    char *out, cmd[1024], want[256];
    ck_assert_int_eq(run("train --steps 2 --quiet --log t.csv --save m.st", &out), 0);
    free(out);
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        snprintf(cmd, sizeof cmd, "rm -rf o; (ulimit -f 1; trap '' XFSZ; '%s' %s 2>&1 >/dev/null)",
                 QKV_BIN, cmds[i][0]);
        snprintf(want, sizeof want, "qkv: %s: %s\n", cmds[i][1], strerror(EFBIG));
        int rc = sh(cmd, &out);
        ck_assert_msg(rc == 1, "qkv %s: exit %d\n%s", cmds[i][0], rc, out);
        ck_assert_msg(strstr(out, want) != NULL, "qkv %s: no '%s' in\n%s", cmds[i][0], want, out);
        free(out);
    }
}
END_TEST

/* A CSV with a second name (a hard link) was replaced by a rename, which
 * left the other name holding the old table; it is written in place, so
 * both names show the new one, as before tables went beside their names. */
START_TEST(test_a_csv_with_two_names_is_written_through_both)
{
    char *out, *a, *b;
    ck_assert_int_eq(sh("echo old > h1.csv && ln h1.csv h2.csv", &out), 0);
    free(out);
    expect("softmax --csv h1.csv", 0, "z = [1,2,3]");
    char p1[200], p2[200];
    snprintf(p1, sizeof p1, "%s/h1.csv", tmp);
    snprintf(p2, sizeof p2, "%s/h2.csv", tmp);
    a = slurp_path(p1);
    b = slurp_path(p2);
    ck_assert_msg(strncmp(a, "vector,i,z,", 11) == 0, "%s", a);
    ck_assert_str_eq(a, b);
    free(a);
    free(b);
}
END_TEST

/* A checkpoint that cannot be written fails before training, not after
 * the whole run: no log, and no failed run's log, is left behind. */
START_TEST(test_train_refuses_an_unwritable_save_before_it_trains)
{
    char *out;
    ck_assert_int_eq(sh("touch afile", &out), 0);
    free(out);
    expect("train --quiet --steps 3 --log early.csv --save afile/m.safetensors", 1,
           "afile exists and is not a directory");
    ck_assert_int_eq(sh("test ! -e early.csv && test ! -e early.csv.failed && "
                        "test ! -e early.csv.part",
                        &out),
                     0);
    free(out);
}
END_TEST

/* A usage error exits 2 whatever the files train is given: its --optim,
 * --momentum and --levels were checked after its outputs, so a bad one
 * beside an output that cannot be replaced exited 1 and named the file. */
START_TEST(test_train_names_a_usage_error_before_its_files)
{
    char *out;
    ck_assert_int_eq(sh("touch afile", &out), 0);
    free(out);
    expect("train --quiet --optim adm --save /dev/null", 2,
           "--optim: 'adm' is not sgd, adam or adamw");
    expect("train --quiet --momentum 0.9 --log afile/t.csv", 2,
           "--momentum is for --optim sgd, not adam");
    expect("train --quiet --levels 4 --save afile/m.st", 2, "--levels: '4' is not a list");
    ck_assert_int_eq(sh("test ! -e t.csv.failed && test ! -e m.st", &out), 0);
    free(out);
}
END_TEST

START_TEST(test_train_names_a_file_in_the_way_of_its_logs_directory)
{
    /* the log's directory was not checked as the checkpoint's was: the
     * message named the LOG.part file, which the user never gave */
    char *out;
    ck_assert_int_eq(sh("touch afile", &out), 0);
    free(out);
    ck_assert_int_eq(run("train --quiet --steps 3 --log afile/t.csv --save m.st", &out), 1);
    ck_assert_str_eq(out, "qkv: train: afile exists and is not a directory\n");
    free(out);
    ck_assert_int_eq(sh("test ! -e m.st", &out), 0);
    free(out);
}
END_TEST

/* A log directory that takes no new file (/proc/self, for root too; a
 * directory without write permission, for anyone else) was found only
 * when train made the log's part file, and the message named that file,
 * LOG.part, which the user never gave ("cannot replace ro/t.csv.part"
 * on a read-only file system): it is checked with the checkpoint's, and
 * named as the checkpoint's is. */
START_TEST(test_train_names_a_log_directory_that_takes_no_file)
{
    char *out;
    const char *dirs[] = {"/proc/self", "ro"};
    const int n = geteuid() == 0 ? 1 : 2;
    ck_assert_int_eq(sh("mkdir ro && chmod 555 ro", &out), 0);
    free(out);
    for (int i = 0; i < n; i++) {
        char args[256], want[256];
        snprintf(args, sizeof args, "train --quiet --steps 3 --log %s/t.csv --save m.st", dirs[i]);
        snprintf(want, sizeof want,
                 "qkv: train: cannot write %s/t.csv: cannot create a file in %s: ", dirs[i],
                 dirs[i]);
        ck_assert_int_eq(run(args, &out), 1);
        ck_assert_msg(strncmp(out, want, strlen(want)) == 0 && strstr(out, ".part") == NULL &&
                          strchr(out, '\n')[1] == '\0',
                      "qkv %s:\n%s", args, out);
        free(out);
    }
    ck_assert_int_eq(sh("test ! -e m.st", &out), 0);
    free(out);
}
END_TEST

START_TEST(test_a_diverged_run_keeps_the_good_checkpoint)
{
    char *out;
    ck_assert_int_eq(run("train --quiet --steps 20 --save m.safetensors --log a.csv", &out), 0);
    free(out);
    char path[128], log[128];
    snprintf(path, sizeof path, "%s/m.safetensors", tmp);
    snprintf(log, sizeof log, "%s/a.csv", tmp);
    size_t n0, n1, l0, l1;
    char *before = (char *)qkv_read_file(path, 1 << 20, &n0, NULL);
    char *log_before = (char *)qkv_read_file(log, 1 << 20, &l0, NULL);
    /* a step the optimizer refused is said with the parameter whose
     * gradient is not finite (it was "the loss or a gradient is not
     * finite", which named none) */
#ifdef QKV_DOUBLE
    /* weights of 1e300 are finite in double: the second step's loss is
     * too, a gradient of wq is not */
    expect_refusal("train --quiet --lr 1e300 --steps 2 --save m.safetensors --log a.csv",
                   "qkv: train: diverged at step 2: ", "wq",
                   "; m.safetensors and a.csv were left untouched");
    /* one step: no later step checks its update, whose weights of 1e300
     * make scores that overflow; the final loss is NaN (it was saved, and
     * train exited 0) */
    expect("train --quiet --lr 1e300 --steps 1 --save m.safetensors --log a.csv", 1,
           "qkv: train: diverged at step 1: after its update the loss on the ");
#else
    /* one step at lr 1e300: the loss and gradients of that step are
     * finite, the weights it leaves are not, which the optimizer says (it
     * said nothing: the final loss was not finite) */
    expect_stop("train --quiet --lr 1e300 --steps 1 --save m.safetensors --log a.csv",
                "qkv: train: diverged at step 1: ", 1, "wq",
                "; m.safetensors and a.csv were left untouched");
    /* at lr 1e20 the weights stay finite (about 1e20) and their scores
     * overflow: the final loss is NaN, a model that train saved and
     * reported with exit 0 (loss=-nan) before the final loss was checked */
    expect("train --quiet --lr 1e20 --steps 1 --save m.safetensors --log a.csv", 1,
           "split is NaN (try a smaller --lr); m.safetensors and a.csv were left untouched");
    /* two at lr 1e20 from Wq, Wk, Wv of std 10: the weights of the first
     * are finite, the second step's loss is not (on every kernel set; at
     * d_k 16 and std 1 the portable kernels' loss is finite and a
     * gradient is not), which stops it before the optimizer: no parameter
     * to name */
    expect("train --quiet --d-k 8 --init-std 10 --lr 1e20 --steps 2 --save m.safetensors --log "
           "a.csv",
           1,
           "qkv: train: diverged at step 2: the loss or a gradient is not finite (try a smaller "
           "--lr); m.safetensors and a.csv were left untouched");
    /* Adam at lr 1e18 from Wq, Wk, Wv of std 10: a finite loss and a
     * gradient of wq that is not, at step 4 (step 3 with the portable
     * kernels) */
    expect_refusal("train --quiet --optim adam --d-k 8 --init-std 10 --lr 1e18 --steps 4 --save "
                   "m.safetensors --log a.csv",
                   "qkv: train: diverged at step ", "wq",
                   "; m.safetensors and a.csv were left untouched");
#endif
    /* the checkpoint and its log are the good run's; the failed run's log
     * is beside them */
    char *after = (char *)qkv_read_file(path, 1 << 20, &n1, NULL);
    char *log_after = (char *)qkv_read_file(log, 1 << 20, &l1, NULL);
    ck_assert(before != NULL && after != NULL && n0 == n1 && memcmp(before, after, n0) == 0);
    ck_assert(log_before != NULL && log_after != NULL && l0 == l1 &&
              memcmp(log_before, log_after, l0) == 0);
    snprintf(log, sizeof log, "%s/a.csv.failed", tmp);
    ck_assert_int_eq(access(log, F_OK), 0);
    snprintf(log, sizeof log, "%s/a.csv.part", tmp);
    ck_assert_int_ne(access(log, F_OK), 0);
    free(before);
    free(after);
    free(log_before);
    free(log_after);
}
END_TEST

/* A diverged run said "m.st and a.csv were left untouched" of files that
 * were not there before it. It names as untouched only those that were,
 * and says the others were not written; in both of train's ways to fail
 * on divergence: a step refused (two steps at lr 1e300), and the last
 * update's loss not finite (one step). */
START_TEST(test_a_diverged_run_calls_untouched_only_the_files_that_were_there)
{
    static const char one[] = "train --quiet --lr 1e300 --steps 1 --save m.st --log a.csv";
    static const char two[] = "train --quiet --lr 1e300 --steps 2 --save m.st --log a.csv";
    expect(one, 1, "(try a smaller --lr); neither m.st nor a.csv was written\n");
    expect(two, 1, "(try a smaller --lr); neither m.st nor a.csv was written\n");
    char *out;
    ck_assert_int_eq(sh("ls -A", &out), 0);
    ck_assert_str_eq(out, "a.csv.failed\n");
    free(out);
    ck_assert_int_eq(sh("echo old > a.csv", &out), 0);
    free(out);
    expect(one, 1, "(try a smaller --lr); a.csv was left untouched and m.st was not written\n");
    expect(two, 1, "(try a smaller --lr); a.csv was left untouched and m.st was not written\n");
    ck_assert_int_eq(sh("mv a.csv m.st", &out), 0);
    free(out);
    expect(one, 1, "(try a smaller --lr); m.st was left untouched and a.csv was not written\n");
    expect(two, 1, "(try a smaller --lr); m.st was left untouched and a.csv was not written\n");
    ck_assert_int_eq(sh("ls -A && cat m.st", &out), 0);
    ck_assert_str_eq(out, "a.csv.failed\nm.st\nold\n");
    free(out);
}
END_TEST

/* A NaN in a CSV log is written "nan": x86's default NaN has its sign bit
 * set, and printf wrote it "-nan". Weights of std 100 and lr 1e6 blow up
 * within a few steps (float) or a few dozen (double); the validation loss
 * goes NaN (inf - inf) at a logged step before the run stops. */
START_TEST(test_a_nan_in_a_csv_log_is_written_nan)
{
    char *out;
    ck_assert_int_eq(run("train --quiet --optim sgd --lr 1e6 --init-std 100 --steps 50 "
                         "--log-every 1 --save n.safetensors --log n.csv",
                         &out),
                     1);
    free(out);
    char path[128];
    snprintf(path, sizeof path, "%s/n.csv.failed", tmp);
    char *log = slurp_path(path);
    ck_assert_msg(strstr(log, ",nan,") != NULL, "no NaN in the failed log:\n%s", log);
    ck_assert_msg(strstr(log, "-nan") == NULL, "a signed NaN in the log:\n%s", log);
    free(log);
}
END_TEST

/* --init-std -0 saved "init_std": "-0", which the loader refused: a
 * checkpoint that eval and resolve could not read, over the good one. A
 * number option's -0 is 0, in the file and in what is echoed. */
/* Row `step` of saturation's runs.csv describes the weights after `step`
 * updates, but its val_acc was measured after one more: row 0 ("at
 * init") then depended on the learning rate. Now row 0 is the same at any
 * rate, and so all of it but nothing later (at lr 5 the first update
 * changes the weights). */
START_TEST(test_saturation_rows_measure_one_set_of_weights)
{
    char *out, *rows[2];
    for (int k = 0; k < 2; k++) {
        char cmd[160], path[128];
        snprintf(cmd, sizeof cmd,
                 "saturation --quiet --dk 16 --steps 3 --log-every 1 --lr %s --no-variance "
                 "--out r%d",
                 k == 0 ? "1e-12" : "5", k);
        ck_assert_int_eq(run(cmd, &out), 0);
        free(out);
        snprintf(path, sizeof path, "%s/r%d/runs.csv", tmp, k);
        rows[k] = slurp_path(path);
    }
    /* the header, then the scaled run's rows 0, 1, 2 */
    const char *a = strchr(rows[0], '\n') + 1, *b = strchr(rows[1], '\n') + 1;
    const char *a1 = strchr(a, '\n') + 1, *b1 = strchr(b, '\n') + 1;
    ck_assert_msg(a1 - a == b1 - b && memcmp(a, b, (size_t)(a1 - a)) == 0,
                  "row 0 depends on the learning rate:\n%.*s%.*s", (int)(a1 - a), a, (int)(b1 - b),
                  b);
    ck_assert_msg(strncmp(a1, b1, (size_t)(strchr(a1, '\n') - a1)) != 0, "row 1 is the same");
    free(rows[0]);
    free(rows[1]);
}
END_TEST

/* bptt's slope for the linear RNN at rho 1 is -1e-9 or so: it printed
 * "-0.0000"; and parallel --batch 1 said "1 sentences". */
START_TEST(test_no_negative_zero_or_wrong_plural_in_tables)
{
    char *out;
    ck_assert_int_eq(run("bptt --quiet --length 12 --train-steps 0 --rho 1 --out bz", &out), 0);
    ck_assert_msg(strstr(out, "rnn          linear      1.00       0.0000 ") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "-0.0000") == NULL, "%s", out);
    free(out);
    ck_assert_int_eq(run("parallel --quiet --batch 1 --lengths 16 --models rnn --min-time 0.001 "
                         "--threads 1 --out pz",
                         &out),
                     0);
    ck_assert_msg(strstr(out, "on 1 sentence of T tokens") != NULL, "%s", out);
    free(out);
    /* distance's header said "1 step of 1 sentences" */
    ck_assert_int_eq(run("distance --quiet --models rnn --distances 0 --seeds 1 --steps 1 "
                         "--eval-every 1 --batch 1 --out dz",
                         &out),
                     0);
    ck_assert_msg(strstr(out, "Adam lr 0.01, clip 1, 1 step of 1 sentence\n") != NULL, "%s", out);
    free(out);
}
END_TEST

START_TEST(test_a_negative_zero_option_is_zero)
{
    char *out;
    ck_assert_int_eq(run("train --quiet --steps 2 --init-std -0 --save z.st --log z.csv", &out), 0);
    free(out);
    ck_assert_int_eq(run("eval --model z.st", &out), 0);
    ck_assert_msg(strstr(out, "init_std=0 ") != NULL, "%s", out);
    free(out);
    ck_assert_int_eq(run("distance --steps 1 --eval-every 1 --seeds 1 --distances 0 --models lstm "
                         "--forget-bias -0 --out zd",
                         &out),
                     0);
    ck_assert_msg(strstr(out, "forget-gate bias 0 at init") != NULL, "%s", out);
    free(out);
    /* and so is a whole number's, whether the option is signed or not */
    ck_assert_int_eq(run("train --quiet --steps 2 --seed -0 --save z0.st --log z0.csv", &out), 0);
    free(out);
    ck_assert_int_eq(run("eval --model z0.st", &out), 0);
    ck_assert_msg(strstr(out, "seed=0") != NULL, "%s", out);
    free(out);
    expect("train --seed -1", 2, "--seed: '-1' is not a whole number");
    expect("train --seed -", 2, "--seed: '-' is not a whole number");
}
END_TEST

START_TEST(test_input_is_parsed_strictly_and_limits_agree)
{
    expect("saturation --out ''", 2, "--out: the file or directory name is empty");
    expect("train --save ''", 2, "--save: the file or directory name is empty");
    /* a file option that names a directory is refused before anything is
     * made (train made nd/ first, then refused it as not a regular file) */
    expect("train --save nd/", 2, "--save: 'nd/' names a directory, not a file");
    expect("train --log nd/..", 2, "--log: 'nd/..' names a directory, not a file");
    expect("resolve --csv . 小明他", 2, "--csv: '.' names a directory, not a file");
    char nd[160];
    snprintf(nd, sizeof nd, "%s/nd", tmp);
    ck_assert_int_ne(access(nd, F_OK), 0);
    expect("train --levels 1,,2", 2, "--levels: '1,,2'");
    expect("train --levels 1,2,", 2, "--levels: '1,2,'");
    expect("train --levels 2,2", 2, "--levels: '2,2'");
    expect("saturation --dk 4,16,", 2, "--dk: '4,16,'");
    expect("saturation --dk ,4", 2, "--dk: ',4'");
    expect("saturation --dk 4097", 2, "values of d_k from 1 to 4096");
    expect("train --d-k 4097", 2, "--d-k: '4097' is not a whole number in [1, 4096]");
    expect("train --steps +5", 2, "--steps: '+5'");
    expect("train --steps ' 5'", 2, "--steps: ' 5'");
    expect("train --lr 0x10", 2, "--lr: '0x10'");
    expect("train --lr nan", 2, "--lr: 'nan'");
    expect("train --seed -1", 2, "--seed: '-1' is not a whole number in [0, 18446744073709551615]");
    expect("demo --seed 18446744073709551616", 2, "in [0, 18446744073709551615]");
    /* a number beyond qkv_real's range is refused, not made inf and a NaN */
    if (sizeof(qkv_real) == 4)
        expect("softmax 1e39,0", 2, "'1e39,0' is not a list of up to 32 numbers");
    else
        expect("softmax 1e309,0", 2, "'1e309,0' is not a list of up to 32 numbers");
    expect("softmax 1,,2", 2, "'1,,2'");
    char *out;
    ck_assert_int_eq(run("demo --seed 18446744073709551615", &out), 0);
    free(out);
}
END_TEST

/* Runs `qkv` with FMT's %s as PATH, which must be refused with exit 2
 * and the one line "qkv: OPT: 'PATH' WHAT" first. */
static void expect_path_refused(const char *fmt, const char *opt, const char *path,
                                const char *what)
{
    char args[256], want[256], *out;
    snprintf(args, sizeof args, fmt, path);
    snprintf(want, sizeof want, "qkv: %s: '%s' %s\n", opt, path, what);
    const int rc = run(args, &out);
    ck_assert_msg(rc == 2, "qkv %s: exit %d, expected 2\n%s", args, rc, out);
    ck_assert_msg(strncmp(out, want, strlen(want)) == 0, "qkv %s:\n%s", args, out);
    free(out);
}

/* Runs `qkv` with FMT's %s as PATH, which must fail with exit 1 and the
 * one line WANT, whose %s is PATH as the command names it (SHOWN). */
static void expect_path_fails(const char *fmt, const char *path, const char *want_fmt,
                              const char *shown)
{
    char args[256], want[512], *out;
    snprintf(args, sizeof args, fmt, path);
    snprintf(want, sizeof want, want_fmt, shown);
    const int rc = run(args, &out);
    ck_assert_msg(rc == 1, "qkv %s: exit %d, expected 1\n%s", args, rc, out);
    ck_assert_msg(strcmp(out, want) == 0, "qkv %s:\n%s\nexpected:\n%s", args, out, want);
    free(out);
}

/* The exit status says what was wrong: 2 for a command line that is
 * wrong whatever the disk holds, 1 for a path the file system refuses.
 * A file option's "d/", "." or "x/.." names a directory by its spelling,
 * and is a usage error; "--csv d" where d is a directory now is the
 * file system's answer, exit 1 with the message the command gives for
 * its default path (train exited 2 for "--log d" and 1 for a directory
 * at out/train.csv). Nothing is made on the way. */
START_TEST(test_a_file_option_naming_a_directory_fails_by_its_spelling_or_the_disk)
{
    char *out;
    ck_assert_int_eq(sh("mkdir d && ln -s d dlink", &out), 0);
    free(out);
    char isdir[256];
    snprintf(isdir, sizeof isdir, "%%s: %s\n", strerror(EISDIR));
    static const char *const replace = "qkv: train: %s exists and is not a regular file (%s); "
                                       "refusing to replace it\n";
    struct {
        const char *fmt, *opt, *want;
    } cmds[] = {
        {"softmax --csv %s", "--csv", "qkv: softmax: cannot write %s"},
        {"resolve --csv %s 小明他", "--csv", "qkv: resolve: cannot write %s"},
        {"resolve --model %s 小明他", "--model", "qkv: resolve: %s is a directory, not a file\n"},
        {"eval --model %s", "--model", "qkv: eval: %s is a directory, not a file\n"},
        {"train --steps 1 --quiet --log %s", "--log", NULL},
        {"train --steps 1 --quiet --save %s", "--save", NULL},
    };
    static const char *const spelled[] = {"d/", ".", "d/..", "nd/", "nd/.", "nd/.."};
    static const char *const found[] = {"d", "dlink", "./d", "d/../d"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        for (size_t j = 0; j < sizeof spelled / sizeof spelled[0]; j++)
            expect_path_refused(cmds[i].fmt, cmds[i].opt, spelled[j],
                                "names a directory, not a file");
        for (size_t j = 0; j < sizeof found / sizeof found[0]; j++) {
            char want[512];
            if (cmds[i].want == NULL)
                snprintf(want, sizeof want, replace, "%s",
                         strcmp(found[j], "dlink") == 0 ? "a symbolic link" : "a directory");
            else if (strstr(cmds[i].want, "cannot write") != NULL)
                snprintf(want, sizeof want, "%s: %s\n", cmds[i].want, strerror(EISDIR));
            else
                snprintf(want, sizeof want, "%s", cmds[i].want);
            expect_path_fails(cmds[i].fmt, found[j], want, found[j]);
        }
    }
    /* nothing new, in the directory or beside it */
    ck_assert_int_eq(sh("ls -A . d", &out), 0);
    ck_assert_str_eq(out, ".:\nd\ndlink\n\nd:\n");
    free(out);
}
END_TEST

/* --out naming a file (or a link to one, or a device, with or without a
 * trailing slash) is the mirror of a file option naming a directory: the
 * disk refuses it, exit 1, as when the file is on the default out/ path
 * or on the way to the directory (--out afile/sub); "--out afile" was a
 * usage error. The message names the path as the command uses it. */
START_TEST(test_an_out_option_naming_a_file_fails_with_status_1)
{
    char *out;
    ck_assert_int_eq(sh("echo old > afile && ln -s afile flink && mkdir d", &out), 0);
    free(out);
    static const char *const cmds[][2] = {
        {"ablate --variants full --seeds 1 --steps 5 --eval-every 5 --quiet --out %s", "ablate"},
        {"bptt --rho 0.5 --train-steps 0 --batch 2 --quiet --out %s", "bptt"},
        {"distance --models attention --distances 0 --seeds 1 --steps 25 --quiet --out %s",
         "distance"},
        {"parallel --quiet --out %s", "parallel"},
        {"saturation --dk 4 --steps 5 --log-every 5 --quiet --out %s", "saturation"},
    };
    static const char *const files[][2] = {
        {"afile", "afile"},     {"afile/", "afile"},          {"afile/.", "afile"},
        {"flink", "flink"},     {"d/../afile", "d/../afile"}, {"/dev/null", "/dev/null"},
        {"./afile", "./afile"}, {"afile/sub", "afile"},
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        for (size_t j = 0; j < sizeof files / sizeof files[0]; j++) {
            char want[256];
            snprintf(want, sizeof want, "qkv: %s: %%s exists and is not a directory\n", cmds[i][1]);
            expect_path_fails(cmds[i][0], files[j][0], want, files[j][1]);
        }
    /* the file is as it was, and nothing was made beside it */
    ck_assert_int_eq(sh("cat afile && ls -A . d", &out), 0);
    ck_assert_str_eq(out, "old\n.:\nafile\nd\nflink\n\nd:\n");
    free(out);
}
END_TEST

/* A path that the disk refuses fails the same way whether the user gave
 * it or the command took its default: the same status and the same
 * message. (eval's and train's defaults exited 1 where the same path
 * given with --model, --log or --save exited 2.) */
START_TEST(test_a_refused_path_fails_alike_given_or_by_default)
{
    char *out;
    ck_assert_int_eq(sh("mkdir -p a/out/coref.safetensors b/out/train.csv && mkdir c && "
                        "echo x > c/out",
                        &out),
                     0);
    free(out);
    static const char *const pairs[][3] = {
        {"a", "eval", "eval --model out/coref.safetensors"},
        {"a", "resolve 小明他", "resolve --model out/coref.safetensors 小明他"},
        {"a", "train --steps 1 --quiet", "train --steps 1 --quiet --save out/coref.safetensors"},
        {"b", "train --steps 1 --quiet", "train --steps 1 --quiet --log out/train.csv"},
        {"c", "saturation --dk 4 --steps 1 --quiet",
         "saturation --dk 4 --steps 1 --quiet "
         "--out out/saturation"},
        {"c", "bptt --rho 0.5 --train-steps 0 --batch 2 --quiet",
         "bptt --rho 0.5 --train-steps 0 --batch 2 --quiet --out out/bptt"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        char cmd[512], *by_default, *given;
        snprintf(cmd, sizeof cmd, "cd %s && '%s' %s", pairs[i][0], QKV_BIN, pairs[i][1]);
        const int rd = sh(cmd, &by_default);
        snprintf(cmd, sizeof cmd, "cd %s && '%s' %s", pairs[i][0], QKV_BIN, pairs[i][2]);
        const int rg = sh(cmd, &given);
        ck_assert_msg(rd == 1 && rg == 1, "qkv %s: exit %d; qkv %s: exit %d\n%s%s", pairs[i][1], rd,
                      pairs[i][2], rg, by_default, given);
        ck_assert_msg(strcmp(by_default, given) == 0, "qkv %s:\n%sqkv %s:\n%s", pairs[i][1],
                      by_default, pairs[i][2], given);
        free(by_default);
        free(given);
    }
}
END_TEST

/* A usage error comes before the files: resolve checked its --csv before
 * it looked at the sentence, so that an empty one beside a CSV that
 * cannot be written exited 1 for the file, not 2 for the sentence. */
START_TEST(test_resolve_names_an_empty_sentence_before_its_csv)
{
    char *out;
    ck_assert_int_eq(sh("touch afile", &out), 0);
    free(out);
    expect("resolve --csv afile/x.csv ''", 2, "the sentence is empty");
    expect("resolve --csv afile/x.csv '   '", 2, "the sentence is empty (only spaces)");
}
END_TEST

/* --out d/ (as a shell completes a directory's name) wrote "d//grads.csv":
 * the directory is kept without its trailing slashes and "/.", and only
 * those: a name ending in '.' ("x.") and a "/.." are other directories. */
START_TEST(test_an_out_directory_with_a_trailing_slash_writes_no_double_slash)
{
    static const char *const dirs[][2] = {{"b/", "b"},      {"c//", "c"},     {"e/./", "e"},
                                          {".", "."},       {"x.", "x."},     {"x./", "x."},
                                          {"f/..", "f/.."}, {"g/../", "g/.."}};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        char args[160], want[64];
        snprintf(args, sizeof args, "bptt --quiet --rho 0.5 --train-steps 0 --batch 2 --out %s",
                 dirs[i][0]);
        snprintf(want, sizeof want, "\nwrote %s/grads.csv\n", dirs[i][1]);
        expect(args, 0, want);
    }
}
END_TEST

/* A directory option's value, trimmed, lived in one static buffer: a
 * second one in a command (--a x/ --b y/.) left both reading "y". And the
 * files written in "/" were "//runs.csv". Each option keeps its own, in
 * the argument; "/" stays "/", and a file in it is "/runs.csv". */
START_TEST(test_each_directory_option_keeps_its_own_value)
{
    const char *a = NULL, *b = NULL;
    const cli_opt opts[] = {{"a", OPT_DIR, &a, 0, 0, "DIR: one"},
                            {"b", OPT_DIR, &b, 0, 0, "DIR: another"}};
    char cmd[] = "t", oa[] = "--a", va[] = "x/", ob[] = "--b=y/.";
    char *argv[] = {cmd, oa, va, ob, NULL};
    ck_assert_int_eq(cli_parse(4, argv, opts, 2, "", "", NULL, 0, NULL), CLI_OK);
    ck_assert_str_eq(a, "x");
    ck_assert_str_eq(b, "y");
    char root[] = "/", root_dot[] = "--b=//.";
    char *argv2[] = {cmd, oa, root, root_dot, NULL};
    ck_assert_int_eq(cli_parse(4, argv2, opts, 2, "", "", NULL, 0, NULL), CLI_OK);
    ck_assert_str_eq(a, "/");
    ck_assert_str_eq(b, "/");
    char path[64];
    ck_assert_str_eq(cli_path_in(path, sizeof path, "/", "runs.csv"), "/runs.csv");
    ck_assert_str_eq(cli_path_in(path, sizeof path, "x", "runs.csv"), "x/runs.csv");
    ck_assert_str_eq(cli_path_in(path, sizeof path, "out/bptt", "grads.csv"), "out/bptt/grads.csv");
    ck_assert_str_eq(cli_path_in(path, sizeof path, "x.", "runs.csv"), "x./runs.csv");
}
END_TEST

/* eval and resolve took a checkpoint whose init_std (1e9) no --init-std
 * could have given; the loader holds it to the option's bound. */
START_TEST(test_a_checkpoint_is_held_to_the_options_bounds)
{
    char *out;
    ck_assert_int_eq(run("train --quiet --steps 1 --init-std 100 --log t.csv --save m.st", &out),
                     0);
    free(out);
    char p[160];
    snprintf(p, sizeof p, "%s/m.st", tmp);
    FILE *f = fopen(p, "r+b");
    ck_assert_ptr_nonnull(f);
    char head[4096];
    const size_t n = fread(head, 1, sizeof head, f);
    static const char from[] = "\"init_std\":\"100\"", to[] = "\"init_std\":\"1e9\"";
    size_t at = 0;
    while (at + sizeof from - 1 <= n && memcmp(head + at, from, sizeof from - 1) != 0)
        at++;
    ck_assert_msg(at + sizeof from - 1 <= n, "no %s in the header", from);
    /* the same length: the header's size stays, and its CRC covers the data */
    ck_assert_int_eq(fseek(f, (long)at, SEEK_SET), 0);
    ck_assert_uint_eq(fwrite(to, 1, sizeof to - 1, f), sizeof to - 1);
    ck_assert_int_eq(fclose(f), 0);
    expect("eval --model m.st", 1,
           "qkv: eval: m.st: the metadata 'init_std' is not a number in [0, 100]");
    expect("resolve --model m.st 小明他", 1,
           "qkv: resolve: m.st: the metadata 'init_std' is not a number in [0, 100]");
}
END_TEST

START_TEST(test_messages_escape_control_characters)
{
    char *out;
    /* an escape sequence typed as an option's value is shown, not obeyed */
    ck_assert_int_eq(run("train --optim \"$(printf '\\033[31mred\\nblue')\"", &out), 2);
    ck_assert_msg(strstr(out, "--optim: '\\x1b[31mred\\x0ablue' is not sgd"), "%s", out);
    ck_assert_ptr_null(strchr(out, '\033'));
    free(out);
    /* and invalid UTF-8 is shown as bytes */
    ck_assert_int_eq(run("train --optim \"$(printf 'a\\377b')\"", &out), 2);
    ck_assert_msg(strstr(out, "'a\\xffb'"), "%s", out);
    free(out);
    /* DEL (0x7f) is a control character too */
    ck_assert_int_eq(run("train --optim \"$(printf 'a\\177b')\"", &out), 2);
    ck_assert_msg(strstr(out, "'a\\x7fb'"), "%s", out);
    free(out);
    /* characters that print as nothing, or steer the terminal (C1 CSI) or
     * the line's direction (RLO), are shown by their code points: a BOM,
     * a no-break space, U+009B and U+202E */
    ck_assert_int_eq(
        run("train --optim \"$(printf 'a\357\273\277b\302\240c\302\233d\342\200\256e')\"", &out),
        2);
    ck_assert_msg(strstr(out, "'a\\u{feff}b\\u{a0}c\\u{9b}d\\u{202e}e'"), "%s", out);
    free(out);
    /* and so are the noncharacters, which no font draws: U+FFFE, U+FDD0
     * and U+10FFFF */
    ck_assert_int_eq(
        run("train --optim \"$(printf 'a\357\277\276b\357\267\220c\364\217\277\277d')\"", &out), 2);
    ck_assert_msg(strstr(out, "'a\\u{fffe}b\\u{fdd0}c\\u{10ffff}d'"), "%s", out);
    free(out);
    /* visible text outside ASCII stays as it is */
    expect("train --optim 小明", 2, "--optim: '小明' is not sgd");
}
END_TEST

/* A message that only quotes what the user typed is no message about
 * memory: "unknown command 'out of memory'" was followed by "; free some
 * memory and try again", and a path or list that said so by "try a
 * smaller --batch or --d-k". The whole output is the one line and the
 * usage hint, as written by hand. */
START_TEST(test_quoting_out_of_memory_is_no_memory_message)
{
    static const struct {
        const char *args, *says;
        int rc;
    } cases[] = {
        {"'out of memory'", "qkv: unknown command 'out of memory'\nTry 'qkv --help'.\n", 2},
        {"softmax 'out of memory'",
         "qkv: 'out of memory' is not a list of up to 32 numbers within ", 2},
        {"train --levels 'out of memory'",
         "qkv: --levels: 'out of memory' is not a list of 1, 2, 3\nTry 'qkv train --help'.\n", 2},
        {"train --levels='1,out of memory'",
         "qkv: --levels: '1,out of memory' is not a list of 1, 2, 3\n", 2},
        {"eval --model 'out of memory.st'",
         "qkv: eval: cannot open out of memory.st: No such file or directory\n", 1},
        {"eval --model 'x/out of memory.st'",
         "qkv: eval: cannot open x/out of memory.st: No such file or directory\n", 1},
        /* the value of --opt=value, quoted without its option */
        {"train --optim='out of memory'",
         "qkv: --optim: 'out of memory' is not sgd, adam or adamw\nTry 'qkv train --help'.\n", 2},
        /* one item of a list, quoted without the rest of it */
        {"softmax --base '2,a-base-longer-than-sixty-four-characters-that-then-says-out of "
         "memory' 1,2",
         "qkv: --base: the base 'a-base-longer-than-sixty-four-characters-that-then-says-out of "
         "memory' is longer than 64 characters\nTry 'qkv softmax --help'.\n",
         2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out;
        const int rc = run(cases[i].args, &out);
        ck_assert_msg(rc == cases[i].rc, "qkv %s: exit %d\n%s", cases[i].args, rc, out);
        ck_assert_msg(strncmp(out, cases[i].says, strlen(cases[i].says)) == 0,
                      "qkv %s: not '%s':\n%s", cases[i].args, cases[i].says, out);
        ck_assert_msg(strstr(out, "memory and try") == NULL && strstr(out, "try a") == NULL,
                      "qkv %s: advice on memory:\n%s", cases[i].args, out);
        free(out);
    }
    char *out, cmd[600];
    snprintf(cmd, sizeof cmd, "QKV_THREADS='out of memory' '%s' softmax", QKV_BIN);
    ck_assert_int_eq(sh(cmd, &out), 2);
    ck_assert_str_eq(out, "qkv: QKV_THREADS: 'out of memory' is not a whole number of threads "
                          "in [1, 64]\n");
    free(out);
}
END_TEST

/* What cli_fail_status(s, "%s", text) prints, with advice as the
 * command's (caller frees). */
static char *failure_message(const char *advice, qkv_status s, const char *text)
{
    char path[160];
    snprintf(path, sizeof path, "%s/message.txt", tmp);
    fflush(stderr);
    const int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    ck_assert(saved >= 0 && fd >= 0 && dup2(fd, 2) == 2);
    close(fd);
    cli_memory_advice(advice);
    const int rc = cli_fail_status(s, "%s", text);
    cli_memory_advice(NULL);
    fflush(stderr);
    ck_assert(dup2(saved, 2) == 2);
    close(saved);
    ck_assert_int_eq(rc, CLI_FAIL);
    return slurp_path(path);
}

/* The advice on memory went by the words "out of memory" in the message,
 * with what the user typed blanked out: a checkpoint whose version read
 * "out of memory" was refused with "; try a model trained with a smaller
 * --d-k", and a size that overflows (QKV_ERR_NOMEM, said otherwise) got
 * none. It goes by the failure's status now. The expected lines are the
 * messages as written by hand. */
START_TEST(test_memory_advice_follows_the_status_not_the_words)
{
    /* a checkpoint of metadata alone: its 8-byte little-endian header
     * length, then the header */
    static const char header[] =
        "{\"__metadata__\":{\"format\":\"qkv-coref\",\"version\":\"out of memory\"}}";
    char path[160];
    snprintf(path, sizeof path, "%s/m.st", tmp);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    const unsigned char len[8] = {sizeof header - 1};
    ck_assert_uint_eq(fwrite(len, 1, 8, f), 8);
    ck_assert_uint_eq(fwrite(header, 1, sizeof header - 1, f), sizeof header - 1);
    ck_assert_int_eq(fclose(f), 0);
    char *out;
    ck_assert_int_eq(run("eval --model m.st", &out), 1);
    ck_assert_str_eq(out, "qkv: eval: m.st has checkpoint version out of memory; this qkv reads "
                          "version 1 (upgrade qkv)\n");
    free(out);

    static const struct {
        const char *advice;
        qkv_status s;
        const char *text, *says;
    } cases[] = {
        {"try a smaller --batch", QKV_ERR_FORMAT, "x: version out of memory",
         "qkv: x: version out of memory\n"},
        {"try a smaller --batch", QKV_ERR_IO, "cannot open out of memory.st",
         "qkv: cannot open out of memory.st\n"},
        {"try a smaller --batch", QKV_ERR_NOMEM, "gather: the output's size overflows",
         "qkv: gather: the output's size overflows; try a smaller --batch\n"},
        {NULL, QKV_ERR_NOMEM, "ablate: out of memory",
         "qkv: ablate: out of memory; free some memory and try again\n"},
        /* the library's words for C programmers go, with NOMEM only */
        {"try a smaller --d-k", QKV_ERR_NOMEM,
         "tape: out of memory allocating 64 bytes (the arena has 4096 bytes in use); did a loop "
         "forget qkv_tape_reset?",
         "qkv: tape: out of memory allocating 64 bytes (4096 bytes in use); try a smaller "
         "--d-k\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *m = failure_message(cases[i].advice, cases[i].s, cases[i].text);
        ck_assert_str_eq(m, cases[i].says);
        free(m);
    }
}
END_TEST

/* Runs `qkv ARGS` (rc code) and checks that its output (stdout and
 * stderr) has part and not one raw byte of what BAD_NAME puts in a name:
 * a control character that a terminal obeys, or invalid UTF-8. */
#define BAD_NAME "$(printf '\\377\\033[31m\\007')"
#define BAD_SHOWN "\\xff\\x1b[31m\\x07"
static void expect_escaped(const char *args, int code, const char *part)
{
    char *out;
    int rc = run(args, &out);
    ck_assert_msg(rc == code, "qkv %s: exit %d, expected %d\n%s", args, rc, code, out);
    ck_assert_msg(strstr(out, part) != NULL, "qkv %s: output lacks '%s':\n%s", args, part, out);
    ck_assert_msg(strpbrk(out, "\033\007\377") == NULL, "qkv %s: a raw byte of the name:\n%s", args,
                  out);
    free(out);
}

/* Ordinary messages ("wrote DIR/runs.csv", eval's "model: FILE") printed
 * paths as they were: a name could colour the terminal or ring its bell.
 * They now show them as the error messages do; Chinese stays as it is. */
START_TEST(test_ordinary_messages_escape_what_the_user_typed)
{
    expect_escaped("bptt --rho 0.5 --length 16 --train-steps 2 --quiet --out \"b" BAD_NAME "\"", 0,
                   "\nwrote b" BAD_SHOWN "/grads.csv\n");
    expect_escaped("distance --models rnn --distances 0 --steps 2 --quiet --out \"d" BAD_NAME "\"",
                   0, "\nwrote d" BAD_SHOWN "/runs.csv and d" BAD_SHOWN "/summary.csv\n");
    expect_escaped("ablate --steps 2 --quiet --out \"a" BAD_NAME "\"", 0,
                   "\nwrote a" BAD_SHOWN "/runs.csv, a" BAD_SHOWN "/summary.csv and a" BAD_SHOWN
                   "/curves.csv\n");
    expect_escaped("train --steps 2 --save \"m" BAD_NAME ".st\" --log \"l" BAD_NAME ".csv\"", 0,
                   "; log l" BAD_SHOWN ".csv; model m" BAD_SHOWN ".st\n");
    expect_escaped("eval --model \"m" BAD_NAME ".st\"", 0, "model: m" BAD_SHOWN ".st  d_k=16");
    expect_escaped("saturation --dk 4 --steps 2 --quiet --out \"s" BAD_NAME "\"", 0,
                   "\nwrote s" BAD_SHOWN "/runs.csv and s" BAD_SHOWN "/variance.csv\n");
    expect_escaped("saturation --dk 4 --steps 2 --quiet --no-variance --out \"s" BAD_NAME "\"", 0,
                   "\nwrote s" BAD_SHOWN "/runs.csv\n");
    expect_escaped("parallel --quiet --lengths 16 --models rnn --min-time 0.001 --threads 1 "
                   "--out \"p" BAD_NAME "\"",
                   0, " wrote p" BAD_SHOWN "/steps.csv\n");
    expect_escaped("train --quiet --lr 1e300 --steps 2 --save \"f" BAD_NAME
                   ".st\" --log \"f" BAD_NAME ".csv\"",
                   1, "qkv: train: the failed run's log is f" BAD_SHOWN ".csv.failed\n");
    /* valid UTF-8 is shown as it is */
    expect("bptt --rho 0.5 --length 16 --train-steps 2 --quiet --out 小明", 0,
           "\nwrote 小明/grads.csv\n");
    expect("train --steps 2 --save 模型.st --log 日志.csv", 0, "; log 日志.csv; model 模型.st\n");
    expect("eval --model 模型.st", 0, "model: 模型.st  d_k=16");
}
END_TEST

/* What a terminal shows for raw output: '\r' moves to the line's start,
 * "\033[K" erases to its end, other bytes overwrite (caller frees). */
static char *render_terminal(const char *raw)
{
    size_t cap = strlen(raw) + 1, n = 0, start = 0, col = 0;
    char *out = malloc(cap);
    for (const char *p = raw; *p; p++) {
        if (*p == '\r') {
            col = 0;
        } else if (strncmp(p, "\033[K", 3) == 0) {
            n = start + col;
            p += 2;
        } else if (*p == '\n') { /* the line ends where its text does */
            out[n++] = '\n';
            start = n;
            col = 0;
        } else {
            out[start + col++] = *p;
            n = start + col > n ? start + col : n;
        }
    }
    out[n] = '\0';
    return out;
}

/* Runs `qkv ARGS` on a pseudo-terminal (stdout and stderr both) through
 * util-linux's script(1) and returns what the terminal shows, or NULL if
 * there is no such script here. */
static char *run_on_terminal(const char *args)
{
    char cmd[1024], *out;
    if (system("script -q -c true /dev/null </dev/null >/dev/null 2>&1") != 0)
        return NULL;
    snprintf(cmd, sizeof cmd, "script -q -c \"'%s' %s\" /dev/null </dev/null", QKV_BIN, args);
    sh(cmd, &out);
    char *shown = render_terminal(out);
    free(out);
    return shown;
}

/* The first line of text that begins with a progress bar's '[', or NULL. */
static const char *bar_line(const char *text)
{
    for (const char *l = text; l != NULL && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (*l == '[')
            return l;
    return NULL;
}

START_TEST(test_progress_bars_leave_the_tables_alone_on_a_terminal)
{
    char *shown = run_on_terminal("bptt --rho 0.5,2 --length 16 --train-steps 2 --out b");
    if (shown == NULL) {
        fprintf(stderr, "skipped: no util-linux script(1) to make a terminal\n");
        return;
    }
    ck_assert_msg(strstr(shown, "rnn          linear      0.50 "), "%s", shown);
    ck_assert_msg(bar_line(shown) == NULL, "a bar is left among the rows:\n%s", shown);
    free(shown);
    shown = run_on_terminal("parallel --models rnn,gru --lengths 16,32 --min-time 0.001 "
                            "--threads 1 --out p");
    ck_assert_msg(strstr(shown, "gru           32 "), "%s", shown);
    ck_assert_msg(bar_line(shown) == NULL, "a bar is left among the rows:\n%s", shown);
    free(shown);
    /* saturation's bar ends before the report starts */
    shown = run_on_terminal("saturation --seeds 2 --dk 4 --steps 2 --log-every 1 --out s");
    const char *report = strstr(shown, "d_k scaling on the coreference task");
    ck_assert_msg(report != NULL && strstr(shown, "Var(q·k) for q, k"), "%s", shown);
    ck_assert_msg(bar_line(report) == NULL, "a bar is left in the report:\n%s", shown);
    const char *bar = bar_line(shown);
    ck_assert_msg(bar != NULL && strstr(bar, "] 5/5 runs\n") != NULL, "%s", shown);
    free(shown);
    /* and without a terminal there is no bar and no control character */
    char *out;
    ck_assert_int_eq(run("bptt --rho 0.5 --length 16 --train-steps 2 --out b", &out), 0);
    ck_assert_msg(strchr(out, '\r') == NULL && strchr(out, '\033') == NULL, "%s", out);
    free(out);
}
END_TEST

START_TEST(test_parallel_runs_draw_their_last_count_once)
{
    /* with --jobs 2 the bar drew "2/2 runs" when the last run ended and
     * again when it closed the bar */
    char cmd[1024], *out;
    if (system("script -q -c true /dev/null </dev/null >/dev/null 2>&1") != 0) {
        fprintf(stderr, "skipped: no util-linux script(1) to make a terminal\n");
        return;
    }
    snprintf(cmd, sizeof cmd,
             "script -q -c \"'%s' ablate --variants full,no-v --steps 10 --eval-every 5 "
             "--seeds 1 --jobs 2 --out a\" /dev/null </dev/null",
             QKV_BIN);
    ck_assert_int_eq(sh(cmd, &out), 0);
    const char *last = strstr(out, "] 2/2 runs");
    ck_assert_msg(last != NULL, "%s", out);
    ck_assert_msg(strstr(last + 1, "] 2/2 runs") == NULL, "drawn twice:\n%s", out);
    free(out);
}
END_TEST

/* With --jobs 2 and a run that fails, the bar counted the runs that the
 * failure made the workers skip, and closed at "4/4 runs" on a line of its
 * own above the error. Now it goes, as on the serial path, and the error
 * is the only line. */
START_TEST(test_a_failed_parallel_run_leaves_no_bar)
{
#ifndef QKV_DOUBLE /* double has the range to keep these runs finite */
    if (system("script -q -c true /dev/null </dev/null >/dev/null 2>&1") != 0) {
        fprintf(stderr, "skipped: no util-linux script(1) to make a terminal\n");
        return;
    }
    for (int jobs = 1; jobs <= 2; jobs++) {
        char args[160];
        snprintf(args, sizeof args, "ablate --lr 1e300 --steps 10 --seeds 2 --jobs %d --out j%d",
                 jobs, jobs);
        char *shown = run_on_terminal(args);
        ck_assert_msg(strstr(shown, "qkv: ablate: full, seed 1: diverged at step 1") != NULL, "%s",
                      shown);
        ck_assert_msg(bar_line(shown) == NULL, "--jobs %d left a bar:\n%s", jobs, shown);
        free(shown);
    }
#endif
}
END_TEST

/* The widest bar in raw terminal output, in columns: the text before each
 * "\033[K" (which ends every bar) back to the '\r' or '\n' before it. */
static int widest_bar(const char *raw)
{
    int widest = 0;
    for (const char *k = strstr(raw, "\033[K"); k != NULL; k = strstr(k + 3, "\033[K")) {
        const char *start = k;
        while (start > raw && start[-1] != '\r' && start[-1] != '\n')
            start--;
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)(k - start), start);
        int w = cli_text_width(line);
        widest = w > widest ? w : widest;
    }
    return widest;
}

START_TEST(test_a_bar_fits_a_narrow_terminal)
{
    if (system("script -q -c true /dev/null </dev/null >/dev/null 2>&1") != 0) {
        fprintf(stderr, "skipped: no util-linux script(1) to make a terminal\n");
        return;
    }
    /* a line that wraps is redrawn from its last row only, so every update
     * would leave the rows above it behind */
    char cmd[1024], *out;
    snprintf(cmd, sizeof cmd,
             "script -q -c \"stty cols 20; '%s' train --steps 10 --batch 4 --log-every 5 "
             "--log t.csv --save m.st 2>&1 >/dev/null\" /dev/null </dev/null",
             QKV_BIN);
    sh(cmd, &out);
    ck_assert_msg(strstr(out, "10/10") != NULL, "%s", out);
    ck_assert_msg(widest_bar(out) <= 19, "a bar wider than the terminal:\n%s", out);
    free(out);
    snprintf(cmd, sizeof cmd,
             "script -q -c \"stty cols 8; '%s' bptt --rho 0.5 --length 16 --train-steps 2 "
             "--out b 2>&1 >/dev/null\" /dev/null </dev/null",
             QKV_BIN);
    sh(cmd, &out);
    ck_assert_msg(widest_bar(out) <= 7, "a bar wider than the terminal:\n%s", out);
    free(out);
}
END_TEST

/* A CSV written after the work that cannot be written fails the command
 * before the work: resolve printed its answer and only then failed on
 * --csv, and distance, ablate and saturation did every run before failing
 * on the file they write last, truncating the one they write as they go.
 * Now the output is the one-line error alone and that file is as it was. */
START_TEST(test_a_csv_written_last_that_cannot_be_fails_before_the_work)
{
    char *out;
    ck_assert_int_eq(run("train --steps 2 --quiet --log t.csv --save m.st", &out), 0);
    free(out);
    ck_assert_int_eq(sh("touch afile && mkdir -p x.csv d/summary.csv a/summary.csv "
                        "s/variance.csv && echo old | tee d/runs.csv a/curves.csv s/runs.csv",
                        &out),
                     0);
    free(out);
    const char *cases[][3] = {
        {"resolve --model m.st --csv afile/x.csv \"小明是个运动达人，他平时很爱打篮球\"",
         "qkv: resolve: afile exists and is not a directory\n", NULL},
        {"distance --models attention --distances 0 --seeds 1 --steps 5 --eval-every 5 --quiet "
         "--out d",
         "qkv: distance: cannot write d/summary.csv: Is a directory\n", "d/runs.csv"},
        {"ablate --variants full --seeds 1 --steps 5 --eval-every 5 --quiet --out a",
         "qkv: ablate: cannot write a/summary.csv: Is a directory\n", "a/curves.csv"},
        {"saturation --dk 4 --steps 5 --log-every 5 --quiet --out s",
         "qkv: saturation: cannot write s/variance.csv: Is a directory\n", "s/runs.csv"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_msg(run(cases[i][0], &out) == 1, "qkv %s:\n%s", cases[i][0], out);
        ck_assert_str_eq(out, cases[i][1]);
        free(out);
        if (cases[i][2] == NULL)
            continue;
        char cmd[256];
        snprintf(cmd, sizeof cmd, "cat %s", cases[i][2]);
        ck_assert_int_eq(sh(cmd, &out), 0);
        ck_assert_msg(strcmp(out, "old\n") == 0, "qkv %s: %s holds\n%s", cases[i][0], cases[i][2],
                      out);
        free(out);
    }
    /* and so is a directory named as the file: what the disk holds */
    char isdir[128];
    snprintf(isdir, sizeof isdir, "qkv: resolve: cannot write x.csv: %s\n", strerror(EISDIR));
    ck_assert_int_eq(
        run("resolve --model m.st --csv x.csv \"小明是个运动达人，他平时很爱打篮球\"", &out), 1);
    ck_assert_str_eq(out, isdir);
    free(out);
    /* a table not asked for is not checked */
    expect("saturation --dk 4 --steps 5 --log-every 5 --quiet --no-variance --out s", 0,
           "wrote s/runs.csv\n");
}
END_TEST

/* A command that fails leaves nothing new on disk: the checks made
 * before the work (cli_csv_check, train's) made the directories on the
 * way to an output first, and a later failure (a missing model, an
 * unknown word, a usage error, another output in the way, a name too
 * long) left them behind, empty. */
START_TEST(test_a_failed_command_leaves_no_directory_behind)
{
    char *out;
    ck_assert_int_eq(run("train --steps 2 --quiet --log t.csv --save m.st", &out), 0);
    free(out);
    ck_assert_int_eq(sh("touch afile && ls -A", &out), 0);
    const char *const listing = "afile\nm.st\nt.csv\n";
    ck_assert_str_eq(out, listing);
    free(out);
    char x300[301];
    memset(x300, 'x', sizeof x300 - 1);
    x300[300] = '\0';
    static const char *const cmds[] = {
        "resolve --model none.st --csv n1/x.csv \"小明是个运动达人，他平时很爱打篮球\"",
        "resolve --model m.st --csv n2/x.csv \"小明是个火星人\"",
        "train --quiet --log n3/t.csv --optim rmsprop",
        "train --quiet --log n4/t.csv --save afile/m.st",
        "train --quiet --log n5/t.csv --save n5/%s.st",
        "resolve --model m.st --csv n6/a/%s.csv 小明他",
        "distance --quiet --steps 5 --out n7/%s/b",
        "ablate --quiet --steps 5 --out n8/%s",
        "saturation --quiet --dk 4 --steps 5 --out n9/%s",
    };
    char cmd[600];
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        snprintf(cmd, sizeof cmd, cmds[i], x300);
        const int rc = run(cmd, &out);
        ck_assert_msg(rc == 1 || rc == 2, "qkv %s: exit %d\n%s", cmd, rc, out);
        free(out);
        ck_assert_int_eq(sh("ls -A", &out), 0);
        ck_assert_msg(strcmp(out, listing) == 0, "qkv %s left:\n%s", cmd, out);
        free(out);
    }
    /* the names too long are named as such, before any work */
    snprintf(cmd, sizeof cmd, cmds[5], x300);
    expect(cmd, 1, "File name too long");
    snprintf(cmd, sizeof cmd, cmds[6], x300);
    expect(cmd, 1, "qkv: distance: cannot create directory n7/x");
    /* the check alone passes where the directories can be made, and
     * makes none of them */
    char p[600];
    qkv_error err = qkv_error_none();
    snprintf(p, sizeof p, "%s/c1/c2/x.csv", tmp);
    ck_assert_int_eq(cli_csv_check(p, &err), QKV_OK);
    snprintf(p, sizeof p, "%s/afile/c2/x.csv", tmp);
    ck_assert_int_eq(cli_csv_check(p, &err), QKV_ERR_IO);
    ck_assert_msg(strstr(err.message, "/afile exists and is not a directory"), "%s", err.message);
    snprintf(p, sizeof p, "%s/c1/%s.csv", tmp, x300);
    ck_assert_int_eq(cli_csv_check(p, &err), QKV_ERR_IO);
    ck_assert_msg(strstr(err.message, "File name too long"), "%s", err.message);
    ck_assert_int_eq(sh("ls -A", &out), 0);
    ck_assert_str_eq(out, listing);
    free(out);
}
END_TEST

/* The checks before the work hold a name to the file system's longest
 * (NAME_MAX, from pathconf): a name of exactly that length is taken, as
 * the first directory to make and below it, and one byte more is refused
 * before any work, with nothing made; for train's log the name that
 * counts is its temporary one, NAME.part. */
START_TEST(test_a_name_of_the_longest_length_is_taken_one_more_is_not)
{
    const long max = pathconf(tmp, _PC_NAME_MAX);
    if (max < 16 || max > 300) {
        fprintf(stderr, "skipped: NAME_MAX %ld here\n", max);
        return;
    }
    char name[302], args[700], want[400], *out;
    memset(name, 'x', sizeof name);
    name[max] = '\0';
    static const char *const dirs[] = {"%s", "n/%s"};
    for (size_t i = 0; i < 2; i++) {
        char d[320];
        snprintf(d, sizeof d, dirs[i], name);
        snprintf(args, sizeof args, "bptt --quiet --rho 0.5 --train-steps 0 --batch 2 --out %s", d);
        snprintf(want, sizeof want, "\nwrote %s/grads.csv\n", d);
        expect(args, 0, want);
    }
    name[max] = 'x';
    name[max + 1] = '\0';
    snprintf(args, sizeof args, "bptt --quiet --rho 0.5 --train-steps 0 --batch 2 --out m/%s",
             name);
    ck_assert_int_eq(run(args, &out), 1);
    ck_assert_msg(strstr(out, "File name too long\n") != NULL && strstr(out, "wrote") == NULL, "%s",
                  out);
    free(out);
    /* the log's temporary name: max - 9 bytes and ".csv.part" fit */
    name[max - 9] = '\0';
    snprintf(args, sizeof args, "train --steps 2 --quiet --save m.st --log t/%s.csv", name);
    expect(args, 0, "");
    name[max - 9] = 'x';
    name[max - 8] = '\0';
    snprintf(args, sizeof args, "train --steps 2 --quiet --save m2.st --log t2/%s.csv", name);
    expect(args, 1, ".csv.part: File name too long\n");
    ck_assert_int_eq(sh("test ! -e m && test ! -e t2 && test ! -e m2.st", &out), 0);
    free(out);
    /* a directory on the way that cannot be looked at (here a link to
     * itself) is named as the check finds it, before any work */
    ck_assert_int_eq(sh("ln -s loop loop", &out), 0);
    free(out);
    ck_assert_int_eq(run("bptt --quiet --rho 0.5 --train-steps 0 --batch 2 --out loop/x", &out), 1);
    ck_assert_str_eq(out, "qkv: bptt: cannot create directory loop: Too many levels of symbolic "
                          "links\n");
    free(out);
}
END_TEST

START_TEST(test_train_refuses_a_log_that_is_not_a_regular_file)
{
    /* the log was renamed over whatever --log named: as root, --log
     * /dev/null replaced the device with a file; refuse it as --save does,
     * before training, with nothing left behind */
    char *out;
    ck_assert_int_eq(sh("mkdir d && ln -s t.csv link && mkfifo fifo", &out), 0);
    free(out);
    /* a directory, a link or a pipe, once train looks at what is there
     * (exit 1: the disk refuses it, the command line is not wrong) */
    const char *bad[][2] = {{"d", "a directory"},
                            {"link", "a symbolic link"},
                            {"fifo", "a device or other special file"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[256], want[256];
        snprintf(args, sizeof args, "train --steps 2 --quiet --save m.st --log %s", bad[i][0]);
        snprintf(want, sizeof want,
                 "qkv: train: %s exists and is not a regular file (%s); refusing to replace it",
                 bad[i][0], bad[i][1]);
        expect(args, 1, want);
        snprintf(args, sizeof args, "train --steps 2 --quiet --log t.csv --save %s", bad[i][0]);
        expect(args, 1, want);
    }
    ck_assert_int_eq(sh("test -d d && test -L link && test -p fifo && ls", &out), 0);
    ck_assert_str_eq(out, "d\nfifo\nlink\n");
    free(out);
}
END_TEST

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Writes text to path, making its directory (one level) if needed. */
static void write_file(const char *path, const char *text)
{
    char dir[256];
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = '\0';
    mkdir(dir, 0777);
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    ck_assert_int_ge(fputs(text, f), 0);
    ck_assert_int_eq(fclose(f), 0);
}

/* 1 if a file matching the shell pattern pat exists. */
static int exists_glob(const char *pat)
{
    glob_t g;
    const int found = glob(pat, 0, NULL, &g) == 0 && g.gl_pathc > 0;
    globfree(&g);
    return found;
}

/* Starts `qkv ARGS...` in tmp (SIGINT at its default, output dropped),
 * waits until a file matching pattern (under tmp) exists, sends SIGINT
 * and returns the wait status. */
static int interrupt_once_written(char *const argv[], const char *pattern)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        signal(SIGINT, SIG_DFL);
        int null = open("/dev/null", O_WRONLY);
        if (chdir(tmp) != 0 || null < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0)
            _exit(99);
        execv(QKV_BIN, argv);
        _exit(98);
    }
    char pat[256];
    snprintf(pat, sizeof pat, "%s/%s", tmp, pattern);
    int status = 0, seen = 0;
    /* a limit on the wait, not a measurement: the file comes first */
    for (int i = 0; i < 6000 && !seen; i++) {
        seen = exists_glob(pat);
        if (!seen && waitpid(pid, &status, WNOHANG) == pid)
            ck_abort_msg("qkv %s ended before it wrote %s", argv[1], pattern);
        if (!seen)
            nap_ms(10);
    }
    ck_assert_msg(seen, "qkv %s never wrote %s", argv[1], pattern);
    nap_ms(50); /* into the runs */
    kill(pid, SIGINT);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    return status;
}

/* A worker killed on its own (by hand, by the OOM killer) made the
 * command exit 1 with nothing said: a worker that dies of a signal says
 * nothing itself. */
START_TEST(test_a_worker_killed_alone_is_named)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (chdir(tmp) != 0 || null < 0 || dup2(null, 1) < 0)
            _exit(99);
        int e = open("err.txt", O_WRONLY | O_CREAT | O_TRUNC, 0666);
        if (e < 0 || dup2(e, 2) < 0)
            _exit(99);
        execl(QKV_BIN, "qkv", "distance", "--models", "rnn", "--distances", "0,1", "--steps",
              "8000", "--seeds", "2", "--jobs", "2", "--quiet", "--out", "d", (char *)NULL);
        _exit(98);
    }
    /* its workers are the processes whose parent it is: kill the first */
    int killed = 0;
    for (int i = 0; i < 6000 && !killed; i++) {
        DIR *d = opendir("/proc");
        ck_assert_ptr_nonnull(d);
        struct dirent *e;
        while (!killed && (e = readdir(d)) != NULL) {
            char p[300], comm[64], state;
            int cpid, ppid;
            snprintf(p, sizeof p, "/proc/%s/stat", e->d_name);
            FILE *f = fopen(p, "r");
            if (f == NULL)
                continue;
            if (fscanf(f, "%d (%63[^)]) %c %d", &cpid, comm, &state, &ppid) == 4 && ppid == pid)
                killed = kill(cpid, SIGTERM) == 0;
            fclose(f);
        }
        closedir(d);
        if (!killed && waitpid(pid, NULL, WNOHANG) == pid)
            ck_abort_msg("qkv distance ended before its workers were seen");
        if (!killed)
            nap_ms(2);
    }
    ck_assert(killed);
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 1, "status %#x", status);
    char path[256];
    snprintf(path, sizeof path, "%s/err.txt", tmp);
    char *err = slurp_path(path);
    /* "qkv: distance: the run of rnn at distance 0, seed 1: a worker
     * ...", when it had taken a run (test_faults.c names it) */
    ck_assert_msg(strncmp(err, "qkv: ", 5) == 0 &&
                      strstr(err, "a worker process was ended by signal 15 (") != NULL,
                  "%s", err);
    free(err);
}
END_TEST

/* The pids of the processes whose parent is ppid, into kids (at most
 * max): their count. */
static int children_of(pid_t ppid, pid_t *kids, int max)
{
    int n = 0;
    DIR *d = opendir("/proc");
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    while (n < max && (e = readdir(d)) != NULL) {
        char p[300], comm[64], state;
        int cpid, parent;
        snprintf(p, sizeof p, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(p, "r");
        if (f == NULL)
            continue;
        if (fscanf(f, "%d (%63[^)]) %c %d", &cpid, comm, &state, &parent) == 4 && parent == ppid)
            kids[n++] = cpid;
        fclose(f);
    }
    closedir(d);
    return n;
}

/* 1 while pid runs (a zombie has ended: only its parent's wait is left). */
static int still_running(pid_t pid)
{
    char p[64], comm[64], state = 'Z';
    int got;
    snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(p, "r");
    if (f == NULL)
        return 0;
    const int ok = fscanf(f, "%d (%63[^)]) %c", &got, comm, &state) == 3;
    fclose(f);
    return ok && state != 'Z' && state != 'X';
}

/* Killing only the parent of a --jobs run (kill PID, a job manager that
 * signals one process) left its workers running to the end of their
 * tasks, minutes, on every core: they now end with it. */
START_TEST(test_workers_end_when_their_parent_is_killed)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (chdir(tmp) != 0 || null < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0)
            _exit(99);
        execl(QKV_BIN, "qkv", "distance", "--models", "lstm", "--distances", "64,128", "--steps",
              "5000000", "--seeds", "1", "--jobs", "2", "--quiet", "--out", "d", (char *)NULL);
        _exit(98);
    }
    pid_t kids[2];
    int n = 0;
    for (int i = 0; i < 5000 && n < 2; i++) { /* a limit, not a measurement */
        n = children_of(pid, kids, 2);
        if (n < 2 && waitpid(pid, NULL, WNOHANG) == pid)
            ck_abort_msg("qkv distance ended before its workers were seen");
        if (n < 2)
            nap_ms(2);
    }
    ck_assert_int_eq(n, 2);
    int status = 0;
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM, "status %#x", status);
    int left = 2;
    for (int i = 0; i < 300 && left > 0; i++) { /* up to 3 s */
        left = still_running(kids[0]) + still_running(kids[1]);
        if (left > 0)
            nap_ms(10);
    }
    for (int k = 0; k < 2; k++) /* not to leave them on the cores when this fails */
        if (still_running(kids[k]))
            kill(kids[k], SIGKILL);
    ck_assert_msg(left == 0, "%d worker(s) still running 3 s after their parent was killed", left);
    /* and the parent still removed its partial table */
    char *out;
    ck_assert_int_eq(sh("find . -type f | wc -l", &out), 0);
    ck_assert_str_eq(out, "0\n");
    free(out);
}
END_TEST

START_TEST(test_an_interrupted_run_leaves_no_csv_cut_short)
{
    /* Ctrl-C killed a sweep with its runs.csv half-written (or only its
     * header), which the plots then drew as if it were whole; and a rerun
     * stopped so lost the last whole table. A CSV is now written beside
     * its name and renamed over it when whole. */
    char *sat[] = {"qkv",     "saturation",    "--dk",  "4", "--steps", "5000000",
                   "--quiet", "--no-variance", "--out", "s", NULL};
    char *dist[] = {"qkv",     "distance", "--models", "rnn",     "--distances", "0,1", "--steps",
                    "5000000", "--jobs",   "2",        "--quiet", "--out",       "d",   NULL};
    char *train[] = {"qkv",   "train", "--steps", "5000000", "--quiet",
                     "--log", "t.csv", "--save",  "m.st",    NULL};
    struct {
        char **argv;
        const char *file, *pattern;
    } cases[] = {{sat, "s/runs.csv", "s/.runs.csv.*"},
                 {dist, "d/runs.csv", "d/.runs.csv.*"},
                 {train, "t.csv", "t.csv.part"}};
    for (int again = 0; again < 2; again++) {
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            char path[256];
            snprintf(path, sizeof path, "%s/%s", tmp, cases[i].file);
            if (again && i < 2) /* a whole table from an earlier run */
                write_file(path, "d_k,a\n4,1\n");
            int status = interrupt_once_written(cases[i].argv, cases[i].pattern);
            /* still killed by the signal, so that a shell stops its script */
            ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT,
                          "qkv %s: status %#x, not killed by SIGINT", cases[i].argv[1], status);
            char *out;
            ck_assert_int_eq(sh("find . -type f | sort", &out), 0);
            ck_assert_msg(strstr(out, "/.") == NULL && strstr(out, ".part") == NULL,
                          "qkv %s left a temporary file:\n%s", cases[i].argv[1], out);
            if (again && i < 2) {
                char *kept = slurp_path(path);
                ck_assert_str_eq(kept, "d_k,a\n4,1\n");
                free(kept);
                ck_assert_int_eq(unlink(path), 0);
            } else {
                ck_assert_msg(strstr(out, cases[i].file) == NULL, "qkv %s left %s:\n%s",
                              cases[i].argv[1], cases[i].file, out);
            }
            free(out);
        }
    }
    char *out;
    ck_assert_int_eq(sh("find . -type f | wc -l", &out), 0);
    ck_assert_str_eq(out, "0\n");
    free(out);
}
END_TEST

/* A command that made its output's directory and then failed (a worker
 * that died, a diverged run, a CSV that could not be written) left the
 * directory behind, empty, for the next run to mistake for an earlier
 * one's. It removes each directory it made that is still empty, newest
 * first, and never one that was there before it ran, empty or not. */
START_TEST(test_a_failed_command_removes_the_directories_it_made)
{
    static const char *const fails[] = {
        "QKV_TEST_WORKER_FAULT=0:kill '%s' saturation --quiet --dk 4 --steps 1 --log-every 1 "
        "--no-variance --jobs 2 --out %s",
        "QKV_TEST_WORKER_FAULT=1:exit '%s' distance --quiet --models attention --distances 0 "
        "--seeds 2 --steps 2 --eval-every 1 --jobs 2 --out %s",
        "'%s' ablate --quiet --variants full --seeds 1 --steps 5 --eval-every 5 --lr 1e300 "
        "--out %s",
        "sh -c \"trap '' XFSZ; ulimit -f 0; exec '%s' softmax --csv %s/x.csv\"",
        "sh -c \"trap '' XFSZ; ulimit -f 0; exec '%s' bptt --quiet --rho 0.5 --train-steps 0 "
        "--batch 2 --out %s\"",
    };
    char *out;
    for (size_t i = 0; i < sizeof fails / sizeof fails[0]; i++) {
        char cmd[1024];
        /* made, two levels deep: both go */
        snprintf(cmd, sizeof cmd, fails[i], QKV_BIN, "new/sub");
        ck_assert_msg(sh(cmd, &out) == 1, "%s: not exit 1\n%s", cmd, out);
        free(out);
        ck_assert_int_eq(sh("ls -A", &out), 0);
        ck_assert_msg(strcmp(out, "") == 0, "%s left:\n%s", cmd, out);
        free(out);
        /* below one that was there: only what it made goes */
        ck_assert_int_eq(sh("mkdir keep", &out), 0);
        free(out);
        snprintf(cmd, sizeof cmd, fails[i], QKV_BIN, "keep/sub");
        ck_assert_msg(sh(cmd, &out) == 1, "%s: not exit 1\n%s", cmd, out);
        free(out);
        ck_assert_int_eq(sh("ls -A . keep", &out), 0);
        ck_assert_msg(strcmp(out, ".:\nkeep\n\nkeep:\n") == 0, "%s left:\n%s", cmd, out);
        free(out);
        /* there before and empty: it stays */
        snprintf(cmd, sizeof cmd, fails[i], QKV_BIN, "keep");
        ck_assert_msg(sh(cmd, &out) == 1, "%s: not exit 1\n%s", cmd, out);
        free(out);
        ck_assert_int_eq(sh("ls -A . keep && rmdir keep", &out), 0);
        ck_assert_msg(strcmp(out, ".:\nkeep\n\nkeep:\n") == 0, "%s left:\n%s", cmd, out);
        free(out);
    }
    /* one that holds something stays: train's failed run keeps its log */
    ck_assert_int_eq(run("train --quiet --steps 5 --lr 1e300 --log l/t.csv --save m/m.st", &out),
                     1);
    free(out);
    ck_assert_int_eq(sh("find . | sort", &out), 0);
    ck_assert_str_eq(out, ".\n./l\n./l/t.csv.failed\n");
    free(out);
}
END_TEST

/* The directories made are kept as chains, one entry per output, so
 * that a path of any depth goes: 40 levels left all 40 behind when each
 * directory took an entry of 32. A chain never takes in a directory that
 * was there before: one made below another's directory starts its own. */
START_TEST(test_made_directories_of_any_depth_go_and_no_other)
{
    char path[512] = "", *out;
    for (int i = 1; i <= 40; i++)
        snprintf(path + strlen(path), sizeof path - strlen(path), "l%d/", i);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "sh -c \"trap '' XFSZ; ulimit -f 0; exec '%s' softmax --csv %sx.csv\"", QKV_BIN, path);
    ck_assert_msg(sh(cmd, &out) == 1, "%s: not exit 1\n%s", cmd, out);
    free(out);
    ck_assert_int_eq(sh("ls -A", &out), 0);
    ck_assert_msg(strcmp(out, "") == 0, "40 levels left:\n%s", out);
    free(out);
    /* in this process: n made, n/m made by another, n/m/k/j made: n/m
     * stays, so n does, and n/m/k/j and n/m/k go */
    char cwd[4096];
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    ck_assert_int_eq(chdir(tmp), 0);
    qkv_error err = qkv_error_none();
    ck_assert_int_eq(cli_mkdirs_for("n/x.csv", &err), QKV_OK);
    ck_assert_int_eq(mkdir("n/m", 0777), 0);
    ck_assert_int_eq(cli_mkdirs_for("n/m/k/j/x.csv", &err), QKV_OK);
    cli_remove_made_dirs();
    struct stat sb;
    ck_assert_int_eq(stat("n/m", &sb), 0);
    ck_assert_int_ne(stat("n/m/k", &sb), 0);
    ck_assert_int_eq(rmdir("n/m"), 0);
    ck_assert_int_eq(rmdir("n"), 0);
    ck_assert_int_eq(chdir(cwd), 0);
}
END_TEST

/* A forked worker inherits the handler that removes the program's
 * outputs on SIGTERM; it removed its parent's temporary CSV and
 * directories while the parent ran on. A worker forgets them first
 * (cli_forget_outputs): here a child that forgets, then dies of SIGTERM,
 * leaves the parent's directories, which the parent then removes. */
START_TEST(test_a_worker_killed_leaves_its_parents_outputs)
{
    char cwd[4096];
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    ck_assert_int_eq(chdir(tmp), 0);
    qkv_error err = qkv_error_none();
    ck_assert_int_eq(cli_mkdirs_for("p/q/x.csv", &err), QKV_OK);
    cli_remove_partial_on_signals();
    for (int forget = 1; forget >= 0; forget--) {
        const pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            if (forget)
                cli_forget_outputs();
            raise(SIGTERM);
            _exit(0);
        }
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
        struct stat sb;
        /* forgotten: p/q stays; not forgotten, the handler removes it */
        ck_assert_int_eq(stat("p/q", &sb) == 0, forget);
    }
    signal(SIGTERM, SIG_DFL);
    cli_remove_made_dirs(); /* p/q already gone: p too */
    struct stat sb;
    ck_assert_int_ne(stat("p", &sb), 0);
    ck_assert_int_eq(chdir(cwd), 0);
}
END_TEST

/* And so does one stopped by a signal, once it has removed its CSV. */
START_TEST(test_an_interrupted_run_removes_the_directories_it_made)
{
    char *sat[] = {"qkv",     "saturation",    "--dk",  "4",       "--steps", "5000000",
                   "--quiet", "--no-variance", "--out", "new/sub", NULL};
    const int status = interrupt_once_written(sat, "new/sub/.runs.csv.*");
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT, "status %#x", status);
    char *out;
    ck_assert_int_eq(sh("ls -A", &out), 0);
    ck_assert_str_eq(out, "");
    free(out);
}
END_TEST

/* The size of file name under tmp, or -1. */
static long size_in_tmp(const char *name)
{
    char path[256];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

/* The whole file name in tmp, as a string (caller frees). */
static char *slurp_in_tmp(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    return slurp_path(path);
}

/* 1 if the lines of o are the lines of a and those of b, each in its
 * order, interleaved (whole lines: none cut by the other's). */
static int lines_interleave(const char *o, const char *a, const char *b)
{
    while (*o != '\0') {
        const size_t n = strcspn(o, "\n") + (o[strcspn(o, "\n")] == '\n');
        if (*b != '\0' && strncmp(o, b, n) == 0)
            b += n;
        else if (*a != '\0' && strncmp(o, a, n) == 0)
            a += n;
        else
            return 0;
        o += n;
    }
    return *a == '\0' && *b == '\0';
}

/* "--csv /dev/stdout > o.txt" opened o.txt a second time, at its start:
 * the CSV and the table were written over each other, and most of one
 * was lost. Both are kept whole now, in o.txt as in a pipe: every line
 * of each, in its order. (A second stream on the file, each with its own
 * buffer, kept every byte but cut lines where a buffer filled.) */
START_TEST(test_a_csv_sent_where_standard_output_goes_keeps_both)
{
    /* softmax's table of 8 vectors of 32 numbers is more than a buffer's
     * 4096 bytes: written to o.txt part by part */
    char vectors[8 * 32 * 2 + 1] = "", cmd0[sizeof vectors + 16];
    for (int v = 0; v < 8; v++)
        for (int k = 0; k < 32; k++)
            snprintf(vectors + strlen(vectors), sizeof vectors - strlen(vectors), "%s%d",
                     k == 0 ? (v == 0 ? "" : " ") : ",", (v + k) % 10);
    snprintf(cmd0, sizeof cmd0, "softmax %%s %s", vectors);
    const char *const cmds[] = {cmd0, "resolve --model m.st %s 小明是个运动达人，他平时很爱打篮球"};
    char *out;
    ck_assert_int_eq(run("train --quiet --steps 2 --save m.st --log l.csv", &out), 0);
    free(out);
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char args[600], cmd[700];
        snprintf(args, sizeof args, cmds[i], "");
        snprintf(cmd, sizeof cmd, "'%s' %s > table.txt", QKV_BIN, args);
        ck_assert_int_eq(sh(cmd, &out), 0);
        free(out);
        snprintf(args, sizeof args, cmds[i], "--csv c.csv");
        ck_assert_int_eq(run(args, &out), 0);
        free(out);
        snprintf(args, sizeof args, cmds[i], "--csv /dev/stdout");
        snprintf(cmd, sizeof cmd, "'%s' %s > o.txt", QKV_BIN, args);
        ck_assert_int_eq(sh(cmd, &out), 0);
        free(out);
        const long table = size_in_tmp("table.txt"), csv = size_in_tmp("c.csv");
        ck_assert_msg(table > 4096 || i > 0, "a table of %ld bytes fits one buffer", table);
        ck_assert_msg(size_in_tmp("o.txt") == table + csv, "%s: o.txt has %ld bytes, not %ld + %ld",
                      cmds[i], size_in_tmp("o.txt"), table, csv);
        char *o = slurp_in_tmp("o.txt"), *t = slurp_in_tmp("table.txt"), *c = slurp_in_tmp("c.csv");
        ck_assert_msg(lines_interleave(o, t, c),
                      "%s: o.txt is not the table's and the CSV's lines:\n%.600s", cmds[i], o);
        free(o);
        free(t);
        free(c);
    }
}
END_TEST

START_TEST(test_an_interrupted_run_keeps_a_link_it_writes_through)
{
    /* Ctrl-C removed a symbolic link that a CSV was written through, in
     * place (s/runs.csv -> ../k/t.csv, or --csv /dev/stdout > out.txt):
     * the link is not the CSV, and a failed run leaves it */
    char *sat[] = {"qkv",     "saturation",    "--dk",  "4", "--steps", "5000000",
                   "--quiet", "--no-variance", "--out", "s", NULL};
    char *out;
    ck_assert_int_eq(sh("mkdir s k && ln -s ../k/t.csv s/runs.csv", &out), 0);
    free(out);
    const int status = interrupt_once_written(sat, "k/t.csv");
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT, "status %#x", status);
    ck_assert_int_eq(sh("find . | sort", &out), 0);
    ck_assert_str_eq(out, ".\n./k\n./k/t.csv\n./s\n./s/runs.csv\n");
    free(out);
    ck_assert_int_eq(sh("test -L s/runs.csv && rm -r s k", &out), 0);
    free(out);
}
END_TEST

/* Runs `qkv softmax --csv st/shared.csv` in tmp as the user nobody:
 * its exit status, or -1 if that user cannot run QKV_BIN from here. */
static int softmax_as_nobody(void)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (chdir(tmp) != 0 || null < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0 ||
            setgid(65534) != 0 || setuid(65534) != 0 || access(QKV_BIN, X_OK) != 0)
            _exit(98);
        execl(QKV_BIN, "qkv", "softmax", "--csv", "st/shared.csv", (char *)NULL);
        _exit(98);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status));
    return WEXITSTATUS(status) == 98 ? -1 : WEXITSTATUS(status);
}

START_TEST(test_a_csv_of_another_user_keeps_its_owner)
{
    /* A CSV was written beside its name and renamed over it, so root's
     * rerun took another user's table from them, and a user's rerun over
     * a shared file in a sticky directory (/tmp) failed at the very end,
     * the rename refused, where it had been written in place before. */
    if (geteuid() != 0)
        return; /* only root can make another user's file here */
    char path[256], *out;
    snprintf(path, sizeof path, "%s/mine.csv", tmp);
    write_file(path, "old\n");
    ck_assert_int_eq(chown(path, 65534, 65534), 0);
    ck_assert_int_eq(chmod(path, 0640), 0);
    ck_assert_int_eq(run("softmax --csv mine.csv", &out), 0);
    free(out);
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_int_eq(sb.st_uid, 65534);
    ck_assert_int_eq(sb.st_gid, 65534);
    ck_assert_int_eq(sb.st_mode & 07777, 0640);
    /* root's file, which anyone may write, in a sticky directory */
    ck_assert_int_eq(chmod(tmp, 0755), 0);
    ck_assert_int_eq(sh("mkdir st && chmod 1777 st && echo old >st/shared.csv && "
                        "chmod 666 st/shared.csv",
                        &out),
                     0);
    free(out);
    const int rc = softmax_as_nobody();
    if (rc < 0)
        return; /* the build is not where nobody can run it */
    ck_assert_int_eq(rc, 0);
    snprintf(path, sizeof path, "%s/st/shared.csv", tmp);
    char *table = slurp_path(path);
    ck_assert_msg(strncmp(table, "vector,i,z,", 11) == 0, "st/shared.csv: %s", table);
    free(table);
    ck_assert_int_eq(sh("ls -A st", &out), 0);
    ck_assert_str_eq(out, "shared.csv\n");
    free(out);
}
END_TEST

START_TEST(test_help_with_a_command_shows_that_commands_help)
{
    /* 'qkv help train' printed the list of commands and dropped 'train' */
    char *out, *want;
    ck_assert_int_eq(run("train --help", &want), 0);
    ck_assert_int_eq(run("help train", &out), 0);
    ck_assert_str_eq(out, want);
    free(out);
    free(want);
    expect("help bogus", 2, "qkv: unknown command 'bogus'");
    expect("help train eval", 2, "qkv: help takes one command, not 'eval'");
    expect("help", 0, "Run 'qkv <command> --help'");
    /* help on help is the general help, not an unknown command */
    expect("help help", 0, "Run 'qkv <command> --help'");
    expect("help --help", 0, "Run 'qkv <command> --help'");
    /* 'qkv --help train' and 'qkv -h train' printed the list and dropped
     * 'train'; they are 'qkv help train' */
    ck_assert_int_eq(run("train --help", &want), 0);
    ck_assert_int_eq(run("--help train", &out), 0);
    ck_assert_str_eq(out, want);
    free(out);
    ck_assert_int_eq(run("-h train", &out), 0);
    ck_assert_str_eq(out, want);
    free(out);
    free(want);
    expect("--help bogus", 2, "qkv: unknown command 'bogus'");
}
END_TEST

START_TEST(test_help_lists_version)
{
    /* --help did not mention --version, which works */
    expect("--help", 0, "--version");
    expect("--version", 0, "qkv ");
    /* what follows --version was ignored, an unknown option too, with exit 0 */
    expect("--version --bogus", 2, "qkv: --version takes no arguments, not '--bogus'");
    expect("--version extra", 2, "qkv: --version takes no arguments, not 'extra'");
}
END_TEST

START_TEST(test_train_does_not_follow_a_link_at_its_part_log)
{
    /* the log was written through a symbolic link planted at LOG.part,
     * over the file it pointed to, and the link then renamed to LOG */
    char *out;
    ck_assert_int_eq(sh("echo precious > victim && ln -s victim t.csv.part", &out), 0);
    free(out);
    ck_assert_int_eq(run("train --steps 2 --quiet --log t.csv --save m.st", &out), 0);
    free(out);
    ck_assert_int_eq(sh("cat victim; test -f t.csv && test ! -L t.csv && head -c 5 t.csv", &out),
                     0);
    ck_assert_str_eq(out, "precious\nstep,");
    free(out);
    /* and a directory there is refused, not renamed to LOG.failed */
    ck_assert_int_eq(sh("mkdir d.csv.part", &out), 0);
    free(out);
    expect("train --steps 2 --quiet --log d.csv --save m.st", 1,
           "qkv: train: cannot replace d.csv.part: Is a directory\n");
    ck_assert_int_eq(sh("test -d d.csv.part && test ! -e d.csv.failed", &out), 0);
    free(out);
}
END_TEST

START_TEST(test_gradcheck_shows_the_tolerance_each_row_passed_at)
{
    char *out;
    ck_assert_int_eq(run("gradcheck", &out), 0);
    const double tol = sizeof(qkv_real) == 4 ? 2e-2 : 1e-6;
    if (sizeof(qkv_real) == 4)
        ck_assert_msg(strstr(out, "tolerance: 0.02 (ops), up to 0.05 (layers)\n"), "%.100s", out);
    else
        ck_assert_msg(strstr(out, "tolerance: 1e-06\n"), "%.100s", out);
    /* a row that passed above the ops' tolerance says so */
    int rows = 0;
    for (char *l = out; l != NULL; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        char *end = strchr(l, '\n'), *pass = strstr(l, "  pass");
        if (end == NULL || pass == NULL || pass > end)
            continue;
        /* the columns before the result: entries, max abs err, max rel err */
        char *p = pass;
        while (p > l && p[-1] == ' ')
            p--;
        while (p > l && p[-1] != ' ')
            p--;
        const double rel = atof(p);
        const int starred = strncmp(pass, "  pass *\n", 9) == 0;
        ck_assert_msg(starred == (rel > tol), "row %.*s", (int)(end - l), l);
        /* and its result under the header's (names wider than 30 columns
         * pushed their rows' numbers out of line) */
        char head[512], upto[512];
        const char *h = strstr(out, "\nop "), *hr = h != NULL ? strstr(h, "result\n") : NULL;
        ck_assert_ptr_nonnull(hr);
        snprintf(head, sizeof head, "%.*s", (int)(hr - h - 1), h + 1);
        snprintf(upto, sizeof upto, "%.*s", (int)(pass + 2 - l), l);
        ck_assert_msg(cli_text_width(upto) == cli_text_width(head), "row out of line:\n%s\n%.*s",
                      head, (int)(end - l), l);
        rows++;
    }
    ck_assert_int_gt(rows, 40);
    free(out);
}
END_TEST

/* Every line of a softmax table (after its "z = " line, up to the blank
 * line) ends in the same terminal column. */
static void expect_softmax_aligned(const char *args)
{
    char *out;
    ck_assert_int_eq(run(args, &out), 0);
    int lines = 0, width = -1;
    char *save = NULL;
    for (char *l = strtok_r(out, "\n", &save); l != NULL; l = strtok_r(NULL, "\n", &save)) {
        if (strncmp(l, "z = ", 4) == 0) {
            width = -1;
            continue;
        }
        if (width < 0)
            width = cli_text_width(l);
        ck_assert_msg(cli_text_width(l) == width, "qkv %s: '%s' is %d columns wide, not %d", args,
                      l, cli_text_width(l), width);
        lines++;
    }
    ck_assert_int_ge(lines, 8);
    free(out);
}

START_TEST(test_softmax_summary_rows_line_up_with_the_table)
{
    expect_softmax_aligned("softmax --base 2,e,10 1,2,3");
    expect_softmax_aligned("softmax --base 2 1e38,1e38 0,1");
    /* a base whose header is wider than the 12 columns of the others */
    expect_softmax_aligned("softmax --base 1000000,2.5 1,2,3");
}
END_TEST

START_TEST(test_an_option_has_one_limit_in_every_command)
{
    /* every command that takes the option says the same range */
    static const struct {
        const char *cmds, *arg, *range;
    } cases[] = {
        {"train saturation distance ablate", "--steps 10000001", "in [1, 10000000]"},
        {"train saturation distance ablate bptt parallel", "--batch 4097", "in [1, 4096]"},
        {"train saturation distance ablate", "--lr 0", "in [1e-12, 1e+300]"},
        {"train distance", "--clip -1", "in [0, 1e+12]"},
        {"train saturation", "--init-std 101", "in [0, 100]"},
        {"saturation distance ablate", "--seeds 33", "in [1, 32]"},
        {"train saturation distance ablate parallel", "--threads 65", "in [1, 64]"},
        {"saturation distance ablate", "--jobs 65", "in [1, 64]"},
        {"train saturation", "--log-every 10000001", "in [1, 10000000]"},
        {"distance ablate", "--eval-every 10000001", "in [1, 10000000]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmds[128], *save = NULL;
        snprintf(cmds, sizeof cmds, "%s", cases[i].cmds);
        for (char *c = strtok_r(cmds, " ", &save); c != NULL; c = strtok_r(NULL, " ", &save)) {
            char args[160];
            snprintf(args, sizeof args, "%s %s", c, cases[i].arg);
            expect(args, 2, cases[i].range);
        }
    }
    expect("bptt --train-steps 10000001", 2, "in [0, 10000000]");
    /* and the wider limits work where they were narrower: the roles task
     * takes a batch of 4096 */
    char *out;
    ck_assert_int_eq(run("ablate --quiet --task roles --variants full --batch 4096 --steps 2 "
                         "--seeds 1 --eval-every 2 --out a",
                         &out),
                     0);
    free(out);
}
END_TEST

/* Runs `VAR=VALUE qkv ARGS` and checks the exit code and that the output
 * is the one line `line` (for an error) or contains it. */
static void expect_env(const char *var, const char *value, const char *args, int code,
                       const char *line)
{
    char cmd[512], *out;
    snprintf(cmd, sizeof cmd, "%s='%s' '%s' %s", var, value, QKV_BIN, args);
    int rc = sh(cmd, &out);
    ck_assert_msg(rc == code, "%s: exit %d, expected %d\n%.300s", cmd, rc, code, out);
    if (code == 0)
        ck_assert_msg(strstr(out, line) != NULL, "%s:\n%.300s", cmd, out);
    else
        ck_assert_msg(strcmp(out, line) == 0, "%s: not the one line\n%s\nbut\n%.300s", cmd, line,
                      out);
    free(out);
}

START_TEST(test_bad_environment_values_are_usage_errors)
{
    static const char *kernels[] = {"foo", "AVX2", "portabel", "avx2 "};
    char want[256];
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
        snprintf(
            want, sizeof want,
            "qkv: QKV_KERNELS: '%s' is not a kernel set this build and CPU have (auto, portable",
            kernels[i]);
        char *out;
        char cmd[256];
        snprintf(cmd, sizeof cmd, "QKV_KERNELS='%s' '%s' demo", kernels[i], QKV_BIN);
        ck_assert_int_eq(sh(cmd, &out), 2);
        ck_assert_msg(strncmp(out, want, strlen(want)) == 0 && strchr(out, '\n') != NULL &&
                          strchr(out, '\n')[1] == '\0',
                      "%s:\n%s", cmd, out);
        free(out);
    }
    static const char *threads[] = {"abc", "0", "65", "2x", "+2", "-1"};
    for (size_t i = 0; i < sizeof threads / sizeof threads[0]; i++) {
        snprintf(want, sizeof want,
                 "qkv: QKV_THREADS: '%s' is not a whole number of threads in [1, 64]\n",
                 threads[i]);
        expect_env("QKV_THREADS", threads[i], "demo", 2, want);
    }
    /* --help reads no environment: it shows the help a bad value would
     * otherwise hide */
    expect_env("QKV_KERNELS", "portabel", "train --help", 0, "Usage: qkv train");
    expect_env("QKV_THREADS", "2x", "demo -h", 0, "Usage: qkv demo");
    expect_env("QKV_THREADS", "-1", "demo -- --help", 2, want); /* want: -1's line */
    /* an option is never a value: --help after one that needs a value is
     * the help, whatever the environment holds, and nothing is written to
     * a file called --help; given as the value itself it is none */
    expect_env("QKV_THREADS", "-1", "softmax --csv --help", 0, "Usage: qkv softmax");
    expect_env("QKV_THREADS", "-1", "train --steps 1 --log --help", 0, "Usage: qkv train");
    expect_env("QKV_THREADS", "-1", "train --steps 1 --log=--help", 2, want);
    /* an empty value is the default, and good values work */
    expect_env("QKV_KERNELS", "", "demo", 0, "自注意力输出");
    expect_env("QKV_KERNELS", "portable", "demo", 0, "自注意力输出");
    expect_env("QKV_KERNELS", "auto", "demo", 0, "自注意力输出");
    expect_env("QKV_THREADS", "", "demo", 0, "自注意力输出");
    expect_env("QKV_THREADS", "64", "demo", 0, "自注意力输出");
}
END_TEST

START_TEST(test_two_outputs_or_an_output_and_the_input_cannot_share_a_file)
{
    expect("train --quiet --steps 2 --save same.st --log same.st", 2,
           "qkv: train: --log and --save name the same file, same.st: give two\n");
    char path[160];
    snprintf(path, sizeof path, "%s/same.st", tmp);
    ck_assert_int_ne(access(path, F_OK), 0); /* refused before writing anything */
    expect("train --quiet --steps 2 --save m.st --log ./m.st", 2, "name the same file");
    /* through directories that do not exist yet, which train would make */
    expect("train --quiet --steps 2 --save sub/../m2.st --log m2.st", 2, "name the same file");
    expect("train --quiet --steps 2 --save new/m.st --log new/./x/../m.st", 2,
           "name the same file");
    snprintf(path, sizeof path, "%s/sub", tmp);
    ck_assert_int_ne(access(path, F_OK), 0);
    char *out;
    ck_assert_int_eq(run("train --quiet --steps 2 --save m.st --log l.csv", &out), 0);
    free(out);
    ck_assert_int_eq(sh("ln -s m.st link.st", &out), 0);
    free(out);
    expect("train --quiet --steps 2 --save m.st --log link.st", 2, "name the same file");
    /* resolve's --csv over its own model */
    expect("resolve --model m.st --csv ./m.st \"小明是个运动达人，他平时很爱打篮球\"", 2,
           "qkv: resolve: --csv would overwrite the model, ./m.st: give another file\n");
    expect("resolve --model m.st \"小明是个运动达人，他平时很爱打篮球\"", 0, "他 → ");
}
END_TEST

/* The log is written to LOG.part while train runs and a failed run's is
 * kept as LOG.failed: a --save at either name was renamed over (the
 * checkpoint became the log, or a failed run's log replaced the good
 * checkpoint), though train said it saved the model or left it alone. */
START_TEST(test_train_refuses_a_checkpoint_at_its_logs_side_files)
{
    expect("train --quiet --steps 2 --log x.csv --save x.csv.part", 2,
           "qkv: train: --save x.csv.part is where train writes the log while it runs: "
           "give another file\n");
    expect("train --quiet --steps 2 --log x.csv --save ./x.csv.failed", 2,
           "qkv: train: --save ./x.csv.failed is where train keeps a failed run's log: "
           "give another file\n");
    char path[160];
    snprintf(path, sizeof path, "%s/x.csv", tmp);
    ck_assert_int_ne(access(path, F_OK), 0); /* refused before writing anything */
    /* a name that only starts like them is another file */
    expect("train --quiet --steps 2 --log x.csv --save x.csv.partial", 0, "final:");
}
END_TEST

/* A sweep that fails after it created its CSV (here its first allocation
 * after that fails, or a run diverges) left the CSV cut short, often a
 * header alone, in place of the last whole one. */
START_TEST(test_a_failed_sweep_leaves_no_csv_cut_short)
{
    static const char *const cmds[][2] = {
        {"distance --steps 2 --eval-every 1 --seeds 1 --distances 0 --models rnn", "runs.csv"},
        {"saturation --dk 4 --steps 2", "runs.csv"},
        {"bptt --train-steps 0 --length 16 --batch 2", "grads.csv"},
        {"ablate --steps 2 --eval-every 1 --seeds 1 --variants full", "curves.csv"},
        {"parallel --lengths 16 --batch 2 --min-time 0.001 --threads 1 --models rnn", "steps.csv"},
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char cmd[512], path[256], *out;
        /* a whole run first, then one that fails over it */
        snprintf(cmd, sizeof cmd, "'%s' %s --quiet --out o%zu", QKV_BIN, cmds[i][0], i);
        int rc = sh(cmd, &out);
        ck_assert_msg(rc == 0, "%s: exit %d\n%s", cmd, rc, out);
        free(out);
        snprintf(path, sizeof path, "%s/o%zu/%s", tmp, i, cmds[i][1]);
        char *whole = slurp_path(path);
        snprintf(cmd, sizeof cmd, "QKV_TEST_ALLOC_FAIL=1 '%s' %s --quiet --out o%zu", QKV_BIN,
                 cmds[i][0], i);
        rc = sh(cmd, &out);
        ck_assert_msg(rc == 1 && strstr(out, "out of memory") != NULL, "%s: exit %d\n%s", cmd, rc,
                      out);
        free(out);
        /* the last whole table stays, and nothing of the new one */
        char *kept = slurp_path(path);
        ck_assert_msg(strcmp(kept, whole) == 0, "%s: changed %s", cmd, path);
        free(kept);
        free(whole);
        snprintf(cmd, sizeof cmd, "ls -A o%zu | grep '^[.]'", i);
        ck_assert_msg(sh(cmd, &out) != 0, "%s: left a temporary file: %s", cmd, out);
        free(out);
    }
#ifndef QKV_DOUBLE /* double has the range to keep this run finite */
    expect("ablate --quiet --lr 1e300 --steps 3 --eval-every 1 --seeds 1 --variants full --out a",
           1, "diverged at step");
    char path[160];
    snprintf(path, sizeof path, "%s/a/curves.csv", tmp);
    ck_assert_int_ne(access(path, F_OK), 0);
#endif
}
END_TEST

/* --steps below the default --eval-every was refused for an option the
 * user never gave ("--eval-every 25 is more than --steps 5"), where train
 * and saturation take any --steps with their default intervals; given,
 * the larger interval is still refused. */
START_TEST(test_a_short_run_takes_the_default_eval_interval)
{
    char *out;
    int rc = run("distance --quiet --steps 5 --seeds 1 --distances 0 --models rnn --out d", &out);
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, out);
    free(out);
    rc = run("ablate --quiet --steps 5 --seeds 1 --variants full --out a", &out);
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, out);
    free(out);
    /* one validation, at step 5, in each seed's curve */
    char path[160];
    snprintf(path, sizeof path, "%s/a/curves.csv", tmp);
    char *curves = slurp_path(path);
    ck_assert_msg(curves != NULL && strstr(curves, "\nfull,1,5,") != NULL, "%s", curves);
    free(curves);
    expect("distance --steps 5 --eval-every 25", 2, "--eval-every 25 is more than --steps 5");
    expect("ablate --steps 5 --eval-every 10", 2, "--eval-every 10 is more than --steps 5");
}
END_TEST

/* The second timing column was headed "ms (threads)", whatever --threads
 * said; it names the count, and its numbers sit under it. */
START_TEST(test_parallel_names_its_thread_count)
{
    char *out;
    int rc = run("parallel --quiet --models attention --lengths 16 --batch 2 --min-time 0.001 "
                 "--threads 12 --out p",
                 &out);
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, out);
    const char *head = strstr(out, " ms (12 threads) speed-up\n");
    ck_assert_msg(head != NULL, "%s", out);
    const char *row = strstr(out, "\nattention ");
    ck_assert_msg(row != NULL, "%s", out);
    /* the row's x of the speed-up ends where the header's "speed-up" does */
    const char *head_start = head;
    while (head_start > out && head_start[-1] != '\n')
        head_start--;
    const char *x = strchr(row + 1, '\n');
    ck_assert_msg(x != NULL &&
                      x - (row + 1) == head + strlen(" ms (12 threads) speed-up") - head_start,
                  "%s", out);
    free(out);
}
END_TEST

START_TEST(test_dash_arguments_are_options_and_double_dash_ends_them)
{
    expect("resolve -x", 2, "qkv: unknown option '-x'\nTry 'qkv resolve --help'.");
    expect("resolve -x \"小明是个运动达人，他平时很爱打篮球\"", 2, "unknown option '-x'");
    expect("demo -x", 2, "unknown option '-x'");
    /* --help is known: with a value it is refused as a flag, not unknown */
    expect("demo --help=1", 2, "qkv: --help takes no value\nTry 'qkv demo --help'.");
    expect("bptt --help=", 2, "qkv: --help takes no value");
    char *out;
    ck_assert_int_eq(run("train --quiet --steps 2 --save m.st --log l.csv", &out), 0);
    free(out);
    expect("resolve --model m.st -- \"小明是个运动达人，他平时很爱打篮球\"", 0, "他 → ");
    /* after --, an argument starting with '-' is the sentence */
    expect("resolve --model m.st -- \"-小明\"", 1, "unknown word \"-\" at character 0");
    expect("resolve --model m.st -- -- \"他\"", 2, "unexpected argument '他'");
    /* negative numbers are still softmax's vectors, with or without -- */
    expect("softmax -1,2 -.5,1", 0, "z = [-.5,1]");
    expect("softmax -- -1,2", 0, "z = [-1,2]");
}
END_TEST

/* Calls f(cmd, line, n) for each "  --name ..." line of the --help of
 * every command that takes options, the option's name being the n bytes
 * from line; returns how many of them f checked (f returns 1 for those). */
static int each_help_option(int (*f)(const char *cmd, const char *line, size_t n))
{
    static const char *cmds[] = {"demo",       "train",   "eval",     "resolve",
                                 "saturation", "softmax", "distance", "bptt",
                                 "parallel",   "ablate",  "inspect"};
    int checked = 0;
    for (size_t c = 0; c < sizeof cmds / sizeof cmds[0]; c++) {
        char args[128], *help;
        snprintf(args, sizeof args, "%s --help", cmds[c]);
        ck_assert_int_eq(run(args, &help), 0);
        char *save = NULL;
        for (char *l = strtok_r(help, "\n", &save); l != NULL; l = strtok_r(NULL, "\n", &save)) {
            const size_t n = strncmp(l, "  --", 4) == 0 ? strcspn(l + 2, " ") : 0;
            if (n > 0)
                checked += f(cmds[c], l + 2, n);
        }
        free(help);
    }
    return checked;
}

/* An option that takes a value refuses an option in its place. */
static int refuses_an_option_as_value(const char *cmd, const char *opt, size_t n)
{
    if (opt[n] != ' ' || opt[n + 1] == ' ')
        return 0; /* a flag: its help follows the padding */
    char args[128], want[128];
    snprintf(args, sizeof args, "%s %.*s --quiet", cmd, (int)n, opt);
    snprintf(want, sizeof want, "qkv: %.*s needs a value, not the option '--quiet'", (int)n, opt);
    expect(args, 2, want);
    return 1;
}

/* An option that takes a FILE or a DIR refuses "-", naming the option
 * (and, for --csv, /dev/stdout). */
static int refuses_a_dash_for_a_path(const char *cmd, const char *opt, size_t n)
{
    const char *arg = opt + n + 1;
    const int file = strncmp(arg, "FILE ", 5) == 0, dir = strncmp(arg, "DIR ", 4) == 0;
    if (!file && !dir)
        return 0;
    char args[128], want[256];
    snprintf(args, sizeof args, "%s %.*s -", cmd, (int)n, opt);
    const int csv = n == 5 && strncmp(opt, "--csv", 5) == 0;
    snprintf(want, sizeof want,
             "qkv: %.*s: '-' is not standard input or output here; write %.*s %s./- for a "
             "%s named '-'\n",
             (int)n, opt, (int)n, opt, csv ? "/dev/stdout for standard output, or --csv " : "",
             file ? "file" : "directory");
    expect(args, 2, want);
    return 1;
}

/* An option's value is the next argument only if that does not read as
 * an option itself: "train --log --seeds 3" wrote the log to a file
 * called --seeds and trained with the default seeds, and "distance --out
 * --quiet" ran its whole sweep into a directory called --quiet. The user
 * forgot a value; it is refused, as Python's argparse does, with the way
 * to give such a value on purpose. */
START_TEST(test_an_option_value_that_reads_as_an_option_is_refused)
{
    expect("train --quiet --steps 1 --log --seeds 3", 2,
           "qkv: --log needs a value, not the option '--seeds' "
           "(write --log=--seeds if that is its name)\nTry 'qkv train --help'.\n");
    expect("saturation --out --quiet", 2, "qkv: --out needs a value, not the option '--quiet'");
    expect("resolve --model -- 小明他", 2, "qkv: --model needs a value, not the option '--'");
    expect("softmax --csv -h", 0, "Usage: qkv softmax"); /* what was asked for */
    /* a number cannot read as an option: no --seed=--no-scale to suggest */
    expect("demo --seed --no-scale", 2,
           "qkv: --seed needs a value, not the option '--no-scale'\nTry 'qkv demo --help'.\n");
    char *out;
    ck_assert_int_eq(sh("ls -A", &out), 0);
    ck_assert_msg(out[0] == '\0', "files were made:\n%s", out);
    free(out);
    /* every option of every command that takes a value */
    const int checked = each_help_option(refuses_an_option_as_value);
    ck_assert_int_ge(checked, 60);
    /* what does not read as an option is still a value: a negative number
     * and "-"; and --opt=VALUE takes any value */
    expect("distance --quiet --models lstm --forget-bias -1 --distances 0 --seeds 1 --steps 1 "
           "--eval-every 1 --out d",
           0, "forget-gate bias -1");
    expect("softmax --csv=--x.csv 1,2", 0, "z = [1,2]");
    ck_assert_int_eq(sh("test -s ./--x.csv", &out), 0);
    free(out);
}
END_TEST

/* "--=5" was reported as "unknown option '--'": neither what the user
 * typed nor what is wrong with it. The message quotes the argument and
 * says that it names no option; every command parses through cli_parse,
 * so each says the same. */
START_TEST(test_an_option_without_a_name_is_quoted_whole)
{
    expect("demo --=5", 2,
           "qkv: '--=5' is not an option: no name between '--' and '='\n"
           "Try 'qkv demo --help'.\n");
    expect("train --quiet --steps 1 --=", 2,
           "qkv: '--=' is not an option: no name between '--' and '='\n");
    static const char *cmds[] = {"demo",    "gradcheck",  "train",   "eval",
                                 "resolve", "saturation", "softmax", "distance",
                                 "bptt",    "parallel",   "ablate",  "inspect"};
    for (size_t c = 0; c < sizeof cmds / sizeof cmds[0]; c++) {
        char args[64], want[128];
        snprintf(args, sizeof args, "%s --=5", cmds[c]);
        snprintf(want, sizeof want,
                 "qkv: '--=5' is not an option: no name between '--' and '='\n"
                 "Try 'qkv %s --help'.\n",
                 cmds[c]);
        expect(args, 2, want);
    }
    /* as a value it is refused as any option is */
    expect("softmax --csv --=5", 2, "qkv: --csv needs a value, not the option '--=5'");
    char *out;
    ck_assert_int_eq(sh("ls -A", &out), 0);
    ck_assert_msg(out[0] == '\0', "files were made:\n%s", out);
    free(out);
}
END_TEST

/* "-" is not standard output for a file or directory: softmax --csv -
 * wrote its CSV to a file called "-", and saturation --out - its tables
 * to a directory of that name, where a user reading "-" as standard
 * output (or input, for --model) found nothing. No option reads or
 * writes a standard stream for "-" (a CSV goes there as /dev/stdout), so
 * every option that takes a file or directory refuses it, and names the
 * option and the way to a file called "-" on purpose. */
START_TEST(test_a_dash_for_a_file_or_directory_is_refused)
{
    expect("softmax --csv -", 2,
           "qkv: --csv: '-' is not standard input or output here; write --csv /dev/stdout for "
           "standard output, or --csv ./- for a file named '-'\nTry 'qkv softmax --help'.\n");
    expect("softmax --csv=- 1,2", 2, "qkv: --csv: '-' is not standard input or output here");
    expect("saturation --out -", 2,
           "qkv: --out: '-' is not standard input or output here; write --out ./- for a "
           "directory named '-'\nTry 'qkv saturation --help'.\n");
    /* every option of every command that takes a FILE or a DIR */
    const int checked = each_help_option(refuses_a_dash_for_a_path);
    ck_assert_int_eq(checked, 11); /* --csv twice, --model twice, --log, --save, --out five times */
    char *out;
    ck_assert_int_eq(sh("ls -A", &out), 0);
    ck_assert_msg(out[0] == '\0', "files were made:\n%s", out);
    free(out);
    /* a file called "-" is still there for the asking */
    expect("softmax --csv ./- 1,2", 0, "z = [1,2]");
    ck_assert_int_eq(sh("head -n 1 ./-", &out), 0);
    ck_assert_str_eq(out, "vector,i,z,linear,softmax\n");
    free(out);
}
END_TEST
/* A name of exactly 4000 bytes is taken: the limit is "longer than". */
START_TEST(test_a_path_option_of_4000_bytes_is_taken)
{
    const char *f = NULL;
    const cli_opt opts[] = {{"f", OPT_FILE, &f, 0, 0, "FILE: one"}};
    static char v[4002];
    memset(v, 'x', 4000);
    v[4000] = '\0';
    char cmd[] = "t", of[] = "--f";
    char *argv[] = {cmd, of, v, NULL};
    ck_assert_int_eq(cli_parse(3, argv, opts, 1, "", "", NULL, 0, NULL), CLI_OK);
    ck_assert_ptr_eq(f, v);
    v[4000] = 'x';
    v[4001] = '\0';
    ck_assert_int_eq(cli_parse(3, argv, opts, 1, "", "", NULL, 0, NULL), CLI_USAGE);
}
END_TEST

/* The log's train_loss is the mean loss of the steps since the last row,
 * not that over the batch size: with --init-std 0 Wq, Wk and Wv are 0,
 * every logit of step 1 is 0, and its loss is ln 12 ("%.6g" of
 * math.log(12) is 2.48491) on any batch. */
START_TEST(test_train_logs_the_mean_loss_of_its_steps)
{
    char *out;
    expect("train --steps 1 --log-every 1 --init-std 0 --quiet --save m.st --log l.csv", 0, "");
    ck_assert_int_eq(sh("sed -n 2p l.csv", &out), 0);
    ck_assert_msg(strncmp(out, "1,2.48491,", 10) == 0, "%s", out);
    free(out);
}
END_TEST

/* --weight-decay 0 is a weight decay of 0, not "the default": AdamW
 * without it is Adam (as torch.optim.AdamW(weight_decay=0) is
 * torch.optim.Adam), the same log to the bit. */
START_TEST(test_adamw_with_no_weight_decay_is_adam)
{
    char *out;
    expect("train --steps 5 --quiet --optim adamw --weight-decay 0 --save a.st --log a.csv", 0,
           "final:");
    expect("train --steps 5 --quiet --optim adam --save b.st --log b.csv", 0, "final:");
    ck_assert_int_eq(sh("cmp a.csv b.csv", &out), 0);
    free(out);
}
END_TEST

/* A sentence without the name the model picks says it is a guess: here
 * there is no name at all. */
START_TEST(test_resolve_says_when_the_name_is_not_in_the_sentence)
{
    expect("train --steps 2 --quiet --save m.st --log l.csv", 0, "final:");
    expect("resolve --model m.st 他很爱唱歌", 0, "(not in the sentence: a guess)\n");
}
END_TEST

/* A flag takes no value: --q=1 is a usage error, and sets nothing. */
START_TEST(test_a_flag_given_a_value_is_a_usage_error)
{
    int q = 0;
    const cli_opt opts[] = {{"q", OPT_FLAG, &q, 0, 0, "quiet"}};
    char cmd[] = "t", oq[] = "--q=1";
    char *argv[] = {cmd, oq, NULL};
    ck_assert_int_eq(cli_parse(2, argv, opts, 1, "", "", NULL, 0, NULL), CLI_USAGE);
    ck_assert_int_eq(q, 0);
    expect("train --quiet=yes", 2, "--quiet takes no value");
}
END_TEST

START_TEST(test_an_output_path_too_long_for_its_files_is_refused)
{
    /* DIR/grads.csv would not fit a path buffer: refused before anything is
     * written, not cut short to DIR/grads.c or some other name */
    expect("bptt --quiet --rho 1 --length 9 --batch 1 --train-steps 0 "
           "--out \"$(printf 'ab/%.0s' $(seq 1362))\"",
           2, "--out: the file or directory name is longer than 4000 bytes");
    char *out;
    ck_assert_int_eq(sh("test ! -e ab", &out), 0);
    free(out);
    expect("train --save \"$(printf 'x%.0s' $(seq 4001))\"", 2,
           "--save: the file or directory name is longer than 4000 bytes");
}
END_TEST

START_TEST(test_a_subnormal_number_is_a_number)
{
    /* strtod reports ERANGE for a result below DBL_MIN; only overflow is an
     * error, so 1e-320 parses as 1e-400 (to 0) does */
    double d = -1;
    ck_assert_int_eq(cli_parse_double("1e-320", &d), 0);
    ck_assert(d > 0 && d < 1e-300);
    ck_assert_int_eq(cli_parse_double("-4.9e-324", &d), 0);
    ck_assert(d < 0);
    ck_assert_int_eq(cli_parse_double("1e-400", &d), 0);
    ck_assert(d == 0);
    ck_assert_int_ne(cli_parse_double("1e309", &d), 0);
    ck_assert_int_ne(cli_parse_double("-1e309", &d), 0);
    expect("softmax 1e-320,0", 0, "z = [1e-320,0]");
    /* an exponent may carry a '+', as Python's float() and %e write it */
    ck_assert_int_eq(cli_parse_double("1e+5", &d), 0);
    ck_assert(d == 100000);
    ck_assert_int_eq(cli_parse_double("2.5E+1", &d), 0);
    ck_assert(d == 25);
    ck_assert_int_ne(cli_parse_double("1e+", &d), 0);
}
END_TEST

/* Trains a small model into tmp/m.st, then sets the weights named by
 * which ("qk": Wq and Wk, "vo": Wv and Wo) so large that a product of
 * them overflows, finite as the loader wants them. */
static void save_an_overflowing_model(const char *which)
{
    char *out, p[160];
    ck_assert_int_eq(run("train --quiet --steps 2 --d-k 2 --save m.st --log l.csv", &out), 0);
    free(out);
    snprintf(p, sizeof p, "%s/m.st", tmp);
    qkv_error err = qkv_error_none();
    qkv_coref_model *m = qkv_coref_load(p, qkv_coref_fingerprint(), &err);
    ck_assert_msg(m != NULL, "%s", err.message);
#ifdef QKV_DOUBLE
    const qkv_real big = 1e300;
#else
    const qkv_real big = 3e38f;
#endif
    int qk = strcmp(which, "qk") == 0;
    qkv_tensor *a = qk ? m->wq : m->wv, *b = qk ? m->wk : m->wo;
    for (size_t i = 0; i < a->numel; i++)
        a->data[i] = big;
    for (size_t i = 0; i < b->numel; i++)
        b->data[i] = big;
    ck_assert_int_eq(qkv_coref_save(m, qkv_coref_fingerprint(), p, &err), QKV_OK);
    qkv_coref_model_free(m);
}

START_TEST(test_resolve_and_eval_refuse_a_model_whose_attention_overflows)
{
    /* finite weights so large that Q·Kᵀ overflows: the loader takes them,
     * and the attention is NaN. resolve must say so, not draw bars of NaN
     * (a cast of NaN to int, and a loop of 2^31 dots) */
    char *out;
    save_an_overflowing_model("qk");
    /* the output is cut at 64 KiB, so a run that never ends is seen too */
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "{ '%s' resolve --model m.st \"小明是个运动达人，他平时很爱打篮球\" 2>&1; "
             "echo \"exit $?\"; } | head -c 65536",
             QKV_BIN);
    sh(cmd, &out);
    ck_assert_msg(strcmp(out, "qkv: resolve: m.st gives non-finite attention weights for this "
                              "sentence (are its weights too large?)\nexit 1\n") == 0,
                  "%.300s", out);
    free(out);
    /* eval, which printed a table of -nan losses and exited 0 */
    expect("eval --model m.st", 1,
           "qkv: eval: m.st gives non-finite losses or attention (are its weights too large?)");
}
END_TEST

START_TEST(test_resolve_names_the_output_that_overflows)
{
    /* Wq and Wk as trained, Wv and Wo so large that H·Wo overflows: the
     * attention weights are finite, and resolve said they were not */
    save_an_overflowing_model("vo");
    expect("resolve --model m.st \"小明是个运动达人，他平时很爱打篮球\"", 1,
           "qkv: resolve: m.st gives non-finite scores for the names for this sentence (are "
           "its weights too large?)\n");
}
END_TEST

/* A /proc file says its size is 0 whatever it holds: eval said that
 * /proc/self/status "is empty", where it is read to its end and is not a
 * checkpoint. A file that is empty still says so. */
START_TEST(test_a_file_whose_size_says_0_is_read_to_its_end)
{
    char *out;
    ck_assert_int_eq(sh("touch e.st", &out), 0);
    free(out);
    expect("eval --model e.st", 1, "qkv: eval: e.st is empty\n");
    struct stat sb;
    if (stat("/proc/version", &sb) != 0 || sb.st_size != 0)
        return; /* no procfs here */
    ck_assert_int_eq(run("eval --model /proc/self/status", &out), 1);
    static const char want[] = "qkv: eval: /proc/self/status is not a safetensors file";
    ck_assert_msg(strncmp(out, want, sizeof want - 1) == 0, "%s", out);
    free(out);
    /* what qkv_read_file reads is what stdio reads to the end */
    FILE *f = fopen("/proc/version", "rb");
    ck_assert_ptr_nonnull(f);
    char ref[4096];
    const size_t n = fread(ref, 1, sizeof ref, f);
    fclose(f);
    ck_assert_uint_gt(n, 10);
    size_t len = 0;
    qkv_error err = qkv_error_none();
    unsigned char *p = qkv_read_file("/proc/version", 1 << 20, &len, &err);
    ck_assert_msg(p != NULL, "%s", err.message);
    ck_assert_uint_eq(len, n);
    ck_assert(memcmp(p, ref, n) == 0);
    free(p);
    /* and its limit holds for a size it did not know */
    ck_assert_ptr_null(qkv_read_file("/proc/version", 10, &len, &err));
    ck_assert_str_eq(err.message, "/proc/version is too large: more than 10 bytes");
    /* and where the buffer grows past its first 4096 bytes: a file of n
     * bytes is too large for a limit of n - 1, and read whole at n */
    static const char *const big[] = {"/proc/crypto", "/proc/kallsyms"};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        size_t n1 = 0, n2 = 0;
        char *all = NULL;
        for (int k = 0; k < 2; k++) { /* its size, twice, to see it does not change */
            FILE *g = fopen(big[i], "rb");
            if (g == NULL)
                break;
            size_t cap = 1 << 16, m = 0, r;
            char *buf = malloc(cap);
            while ((r = fread(buf + m, 1, cap - m, g)) > 0)
                if ((m += r) == cap)
                    buf = realloc(buf, cap *= 2);
            fclose(g);
            *(k == 0 ? &n1 : &n2) = m;
            free(all);
            all = buf;
        }
        if (n1 <= 4096 || n1 != n2) {
            free(all);
            continue;
        }
        char want[128];
        snprintf(want, sizeof want, "%s is too large: more than %zu bytes", big[i], n1 - 1);
        ck_assert_ptr_null(qkv_read_file(big[i], n1 - 1, &len, &err));
        ck_assert_str_eq(err.message, want);
        p = qkv_read_file(big[i], n1, &len, &err);
        ck_assert_msg(p != NULL, "%s", err.message);
        ck_assert_uint_eq(len, n1);
        ck_assert(memcmp(p, all, n1) == 0);
        free(p);
        free(all);
        break;
    }
}
END_TEST

START_TEST(test_ablate_plot_draws_a_run_where_no_variant_reached_90)
{
    /* a short `qkv ablate --steps 30` run: no variant reaches 90%, every
     * steps_to_90_mean is -1, and gnuplot refused the middle panel ("No
     * valid points in histogram"), so ablate.png was not drawn at all */
    char cmd[512], *out;
    snprintf(cmd, sizeof cmd,
             "mkdir -p d/ablate && printf '%%s\\n' "
             "variant,params,seeds,acc_mean,acc_sd,steps_to_90_mean,steps_to_90_sd,reached,"
             "attn_antecedent_mean,attn_self_mean "
             "full,2544,1,0.8590,0.0000,-1.0,0.0,0,0.1065,0.1036 "
             "no-v,2156,1,0.4647,0.0000,-1.0,0.0,0,0.0909,0.1017 >d/ablate/summary.csv && "
             "sh '%s/../../scripts/plots.sh' d png",
             QKV_TEST_DATA);
    sh(cmd, &out);
    ck_assert_msg(strstr(out, "plots: wrote png/ablate.png") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "ablate.gp") == NULL, "%s", out); /* no gnuplot message */
    free(out);
}
END_TEST

START_TEST(test_bptt_says_why_a_row_has_no_slope_instead_of_nan)
{
    /* --rho takes (0, 10] and --length up to 1024, but a linear recurrence
     * with rho 10 over 400 tokens grows as 10^396, past the range of float
     * and of double (and at rho 1.1 the softmax saturates and sends back
     * no gradient): the rows read "nan" and "-nan", with no word of why */
    char *out;
    int rc = run("bptt --quiet --rho 1.1,10 --length 400 --train-steps 0 --batch 2 --out b", &out);
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, out);
    ck_assert_msg(strstr(out, "nan") == NULL, "%s", out);
    ck_assert_msg(strstr(out, "10.00     overflow") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "try a smaller --rho or --length") != NULL, "%s", out);
    free(out);
    /* a gradient that underflows at a tiny rho (in double too: 1e-300
     * to the 60th): a smaller rho would not help, one nearer 1 would */
    rc = run("bptt --quiet --rho 1e-300 --length 64 --train-steps 0 --batch 2 --out b", &out);
    ck_assert_msg(rc == 0 && strstr(out, "no grad:") != NULL &&
                      strstr(out, "try a --rho nearer 1") != NULL &&
                      strstr(out, "try a smaller --rho") == NULL,
                  "exit %d\n%s", rc, out);
    free(out);
    /* a slope that can be fitted: no word, no note */
    rc = run("bptt --quiet --rho 1.1 --train-steps 0 --batch 2 --out b", &out);
    ck_assert_msg(rc == 0 && strstr(out, "overflow") == NULL && strstr(out, "no grad") == NULL &&
                      strstr(out, "try a smaller") == NULL,
                  "exit %d\n%s", rc, out);
    free(out);
}
END_TEST

START_TEST(test_distance_names_pytorchs_forget_bias_in_its_header)
{
    /* --forget-bias pytorch is stored as NAN, and the header printed
     * "LSTM forget-gate bias nan at init" */
    char *out;
    int rc = run("distance --quiet --forget-bias pytorch --steps 1 --eval-every 1 --seeds 1 "
                 "--distances 0 --models lstm --out d",
                 &out);
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, out);
    ck_assert_msg(strstr(out, "LSTM forget-gate bias PyTorch's U(±1/√H) at init") != NULL, "%s",
                  out);
    ck_assert_msg(strstr(out, "nan") == NULL, "%s", out);
    free(out);
    expect("distance --quiet --forget-bias 0.5 --steps 1 --eval-every 1 --seeds 1 --distances 0 "
           "--models lstm --out d",
           0, "LSTM forget-gate bias 0.5 at init");
}
END_TEST

/* Cells where some seeds of a setting diverged, checked against the rows
 * of runs.csv: the steps-to-90% cell counts only the seeds that got there
 * and did not diverge ("-": none), the accuracy cell averages the seeds
 * that did not diverge, "(n/N)" after it, and summary.csv counts the
 * diverged seeds. At lr 1e18, three of these eight attention runs stop on
 * a non-finite value (in float: double has the range to keep them finite),
 * and no run gets to 90%. */
START_TEST(test_distance_cells_leave_out_the_seeds_that_diverged)
{
#ifdef QKV_DOUBLE
    return;
#endif
    enum { SEEDS = 8 };
    char *out;
    int rc = run("distance --quiet --lr 1e18 --clip 0 --models attention --distances 0 --seeds 8 "
                 "--steps 40 --eval-every 1 --out d",
                 &out);
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, out);
    char path[160];
    snprintf(path, sizeof path, "%s/d/runs.csv", tmp);
    char *csv = slurp_path(path);
    double acc[16], steps[16], div[16];
    ck_assert_int_eq(csv_column(csv, NULL, NULL, "test_acc", acc, 16), SEEDS);
    ck_assert_int_eq(csv_column(csv, NULL, NULL, "steps_to_90", steps, 16), SEEDS);
    ck_assert_int_eq(csv_column(csv, NULL, NULL, "diverged", div, 16), SEEDS);
    int ok = 0, got = 0;
    double sum = 0, acc_sum = 0, acc_ss = 0;
    for (int r = 0; r < SEEDS; r++) {
        if (div[r] != 0)
            continue;
        ok++;
        acc_sum += acc[r];
        acc_ss += acc[r] * acc[r];
        if (steps[r] >= 0)
            sum += steps[r], got++;
    }
    ck_assert_msg(ok > 0 && ok < SEEDS, "%d of %d runs diverged, not some:\n%s", SEEDS - ok, SEEDS,
                  csv);
    /* the accuracy table: mean±sd over the seeds that did not diverge */
    const char *row = strstr(out, "\nattention ");
    ck_assert_msg(row != NULL, "%s", out);
    double mean = -1, sd = -1;
    int k = -1, of = -1;
    ck_assert_msg(sscanf(row, "\nattention %*d %lf±%lf (%d/%d)", &mean, &sd, &k, &of) == 4 &&
                      k == ok && of == SEEDS,
                  "expected (%d/%d) in\n%s", ok, SEEDS, out);
    const double m = acc_sum / ok;
    const double s = ok > 1 ? sqrt((acc_ss - ok * m * m) / (ok - 1)) : 0;
    ck_assert_msg(fabs(mean - m) <= 0.0015 && fabs(sd - s) <= 0.0015, "mean %g sd %g in\n%s", m, s,
                  out);
    /* the steps-to-90% table: "%-10s %7s", then " %11s" */
    const char *table = strstr(out, "Steps to 90% validation accuracy");
    ck_assert_msg(table != NULL, "%s", out);
    row = strstr(table, "\nattention ");
    ck_assert_msg(row != NULL && strcspn(row + 1, "\n") == 18 + 12, "%s", table);
    char cell[12];
    memcpy(cell, row + 1 + 18 + 1, 11);
    cell[11] = '\0';
    const char *c = cell + strspn(cell, " ");
    if (got == 0)
        ck_assert_msg(strcmp(c, "-") == 0, "'%s', but no seed that did not diverge got there\n%s",
                      c, csv);
    else {
        char want[32];
        snprintf(want, sizeof want, "%.0f (%d/%d)", sum / got, got, SEEDS);
        ck_assert_msg(strcmp(c, want) == 0, "'%s', not '%s'\n%s", c, want, csv);
    }
    free(csv);
    /* summary.csv: the same seeds left out, and counted */
    snprintf(path, sizeof path, "%s/d/summary.csv", tmp);
    csv = slurp_path(path);
    double reached[2], diverged[2];
    ck_assert_int_eq(csv_column(csv, NULL, NULL, "reached", reached, 2), 1);
    ck_assert_int_eq(csv_column(csv, NULL, NULL, "diverged", diverged, 2), 1);
    ck_assert_msg(reached[0] == got && diverged[0] == SEEDS - ok, "%s", csv);
    free(csv);
    free(out);
}
END_TEST

/* A run of distance or saturation whose step the optimizer refused says
 * which parameter and value, as train and ablate do (they said only
 * "diverged" in the table), on a line of its own that names the run, the
 * same on any number of jobs; a run stopped by its loss says that. At lr
 * 1e300 the first update of a weight with a gradient overflows float
 * (Adam's is about 1e300, SGD's 1e300·g); saturation's Adam at lr 1e18 from
 * Wq, Wk, Wv of std 10 refuses a gradient of wq (of the scaled run, at step
 * 3 or 4 as the kernels go); its SGD at lr 1e30 stops at the loss of step
 * 2. (In float: double has the range to keep these runs finite.) */
START_TEST(test_distance_and_saturation_name_what_the_optimizer_refused)
{
#ifdef QKV_DOUBLE
    return;
#endif
    static const struct {
        const char *args;  /* with the directory's and --jobs's numbers */
        const char *line;  /* how a run's line starts */
        const char *after; /* and what it says after that */
    } cases[] = {
        {"distance --quiet --lr 1e300 --steps 5 --eval-every 5 --distances 0 --seeds 1 --models "
         "attention,rnn --out d%d --jobs %d",
         "qkv: distance: the run of attention at distance 0, seed 1: diverged at step 1: ",
         "the update of wq is not finite: data["},
        {NULL, "qkv: distance: the run of rnn at distance 0, seed 1: diverged at step 1: ",
         "the update of rnn."},
        {"saturation --quiet --dk 2 --steps 3 --lr 1e300 --no-variance --out s%d --jobs %d",
         "qkv: saturation: the scaled run at d_k 2, seed 1: diverged at step 1: ",
         "the update of wq is not finite: data["},
        {NULL, "qkv: saturation: the unscaled run at d_k 2, seed 1: diverged at step 1: ",
         "the update of wq is not finite: data["},
        {"saturation --quiet --optim adam --init-std 10 --dk 8 --steps 6 --lr 1e18 --no-variance "
         "--out a%d --jobs %d",
         "qkv: saturation: the scaled run at d_k 8, seed 1: diverged at step ",
         ": the gradient of wq is not finite: grad["},
        {"saturation --quiet --dk 2 --steps 3 --lr 1e30 --no-variance --out t%d --jobs %d",
         "qkv: saturation: the scaled run at d_k 2, seed 1: diverged at step 2: ",
         "the loss or a gradient is not finite\n"},
    };
    char *out[2] = {NULL, NULL};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].args != NULL) {
            free(out[0]);
            free(out[1]);
            for (int j = 0; j < 2; j++) {
                char args[256];
                snprintf(args, sizeof args, cases[i].args, j, j + 1);
                ck_assert_msg(run(args, &out[j]) == 0, "qkv %s:\n%s", args, out[j]);
            }
            /* one job or two: the same, but for the directory named */
            const char *w0 = strstr(out[0], "\nwrote "), *w1 = strstr(out[1], "\nwrote ");
            ck_assert(w0 != NULL && w1 != NULL && w0 - out[0] == w1 - out[1]);
            ck_assert_msg(strncmp(out[0], out[1], (size_t)(w0 - out[0])) == 0, "%s\n---\n%s",
                          out[0], out[1]);
        }
        const char *at = strstr(out[0], cases[i].line);
        ck_assert_msg(at != NULL && (at == out[0] || at[-1] == '\n'), "lacks a line '%s':\n%s",
                      cases[i].line, out[0]);
        const size_t eol = strcspn(at, "\n") + 1;
        const char *said = strstr(at + strlen(cases[i].line) - 1, cases[i].after);
        ck_assert_msg(said != NULL && said + strlen(cases[i].after) <= at + eol,
                      "'%s...' lacks '%s':\n%s", cases[i].line, cases[i].after, out[0]);
    }
    free(out[0]);
    free(out[1]);
}
END_TEST

START_TEST(test_distance_says_a_run_diverged)
{
    /* a run whose loss stops being finite was evaluated as it stood, and
     * the table printed its accuracy (about 0.07), exit 0, with no word
     * that training diverged (in float: double has the range to keep
     * these runs finite) */
#ifdef QKV_DOUBLE
    return;
#endif
    char *out;
    int rc = run("distance --quiet --lr 1e300 --steps 5 --eval-every 5 --distances 0 --seeds 1 "
                 "--models attention --out d",
                 &out);
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, out);
    ck_assert_msg(strstr(out, " diverged\n") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "try a\nsmaller --lr") != NULL, "%s", out);
    free(out);
    /* and the CSVs, which the plot reads, gave the run's accuracy as the
     * cell's mean with no word of it either */
    char path[160];
    snprintf(path, sizeof path, "%s/d/runs.csv", tmp);
    char *csv = slurp_path(path);
    ck_assert_msg(strstr(csv, ",seconds\nattention,0,1,0.") != NULL &&
                      strstr(csv, ",-1,1,") != NULL,
                  "%s", csv);
    free(csv);
    snprintf(path, sizeof path, "%s/d/summary.csv", tmp);
    csv = slurp_path(path);
    ck_assert_msg(strstr(csv, "\nattention,0,1,nan,nan,-1.0,0,1\n") != NULL, "%s", csv);
    free(csv);
}
END_TEST

START_TEST(test_distance_names_the_forget_bias_only_with_an_lstm)
{
    /* the header printed the LSTM's forget-gate bias for models that
     * have no LSTM among them */
    char *out;
    int rc = run("distance --quiet --steps 1 --eval-every 1 --seeds 1 --distances 0 "
                 "--models attention,rnn --out d",
                 &out);
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, out);
    ck_assert_msg(strstr(out, "1 step of 32 sentences\n") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "forget-gate") == NULL, "%s", out);
    free(out);
    expect("distance --quiet --steps 1 --eval-every 1 --seeds 1 --distances 0 "
           "--models rnn,lstm --out d",
           0, "1 step of 32 sentences; LSTM forget-gate bias 1 at init\n");
}
END_TEST

START_TEST(test_eval_rebuilds_the_splits_of_the_levels_trained_on)
{
    /* a model trained with --levels 2 was evaluated on the splits of all
     * three levels: rows of "train" sentences it never saw (levels 1 and
     * 3), and a level-2 validation split shuffled differently from the one
     * it trained with, so "val" held sentences it had trained on */
    char *out;
    ck_assert_int_eq(run("train --quiet --levels 2 --steps 30 --save m.st --log l.csv", &out), 0);
    free(out);
    ck_assert_int_eq(run("eval --model m.st", &out), 0);
    ck_assert_msg(strstr(out, "seed=1  levels=2\n") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "train  1 ") == NULL && strstr(out, "train  3 ") == NULL, "%s", out);
    ck_assert_msg(strstr(out, "train  2         231 ") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "val    2          57 ") != NULL, "%s", out);
    free(out);
    /* every level: the header is as before */
    ck_assert_int_eq(run("train --quiet --steps 30 --save m.st --log l.csv", &out), 0);
    free(out);
    expect("eval --model m.st", 0, "seed=1\n\nsplit");
}
END_TEST

START_TEST(test_parallel_plot_on_one_thread_names_no_second_count)
{
    /* qkv parallel --threads 1 times one thread only, and the timing
     * panel's title read "实线 1 线程，虚线 1 线程": dashed lines that are
     * not there, for a thread count that was not run */
    char cmd[1024], *out;
    snprintf(cmd, sizeof cmd,
             "'%s' parallel --quiet --models rnn --lengths 16,32 --batch 2 --threads 1 "
             "--min-time 0.001 --out p >/dev/null && "
             "gnuplot -e \"dir='%s/../../scripts/plots'; infile='p/steps.csv'; "
             "outfile='p.png'; models='rnn'; threads=1\" "
             "'%s/../../scripts/plots/parallel.gp' -e 'show title'",
             QKV_BIN, QKV_TEST_DATA, QKV_TEST_DATA);
    ck_assert_int_eq(sh(cmd, &out), 0);
    ck_assert_msg(strstr(out, "title is \"每个训练步的耗时（1 线程）\"") != NULL, "%s", out);
    free(out);
}
END_TEST

START_TEST(test_bptt_plot_without_training_lists_no_trained_lines)
{
    /* qkv bptt --train-steps 0 measures no trained model, yet the third
     * panel's key listed "RNN 训练后" and "LSTM 训练后" for lines that
     * were not there, under a title that promised before and after */
    char cmd[1024], *out;
    snprintf(cmd, sizeof cmd,
             "'%s' bptt --quiet --rho 0.5 --train-steps 0 --batch 2 --out d/bptt >/dev/null && "
             "mkdir bin && printf '#!/bin/sh\\necho \"$2\" >>args\\nexec %%s \"$@\"\\n' "
             "\"$(command -v gnuplot)\" >bin/gnuplot && chmod +x bin/gnuplot && "
             "PATH=\"$PWD/bin:$PATH\" sh '%s/../../scripts/plots.sh' d png; "
             "grep -o 'trained=[0-9]*' args && "
             "gnuplot -e \"dir='%s/../../scripts/plots'; infile='d/bptt/grads.csv'; "
             "outfile='b.png'; rhos='0.5'; $(grep -o 'trained=[0-9]*' args)\" "
             "'%s/../../scripts/plots/bptt.gp' -e 'show title'",
             QKV_BIN, QKV_TEST_DATA, QKV_TEST_DATA, QKV_TEST_DATA);
    sh(cmd, &out);
    ck_assert_msg(strstr(out, "plots: wrote png/bptt.png") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "trained=0\n") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "title is \"PyTorch 初始化的 RNN 与 LSTM\"") != NULL, "%s", out);
    free(out);
}
END_TEST

START_TEST(test_softmax_base_plot_needs_the_base_variants)
{
    /* the Chinese guide runs `qkv ablate --variants full,no-v`, whose
     * curves.csv has no base-2 or base-10 rows: softmax_base.png was drawn
     * with base e's line alone under a key of five, or not at all when
     * full was missing too (gnuplot: "all points y value undefined") */
    char cmd[1024], *out;
    snprintf(cmd, sizeof cmd,
             "mkdir -p d/ablate && cp '%s/softmax.csv' d/ && "
             "grep -E '^(variant|full|no-v),' '%s/ablate/curves.csv' >d/ablate/curves.csv && "
             "sh '%s/../../scripts/plots.sh' d png",
             QKV_TEST_DATA "/plots", QKV_TEST_DATA "/plots", QKV_TEST_DATA);
    sh(cmd, &out);
    ck_assert_msg(strstr(out, "plots: skipped softmax_base.png: d/ablate/curves.csv lacks the "
                              "variants base-2 base-10 base-2-matched base-10-matched (make them "
                              "with: build/qkv ablate --out d/ablate)") != NULL,
                  "%s", out);
    ck_assert_msg(strstr(out, "wrote png/softmax_base.png") == NULL, "%s", out);
    free(out);
}
END_TEST

START_TEST(test_plot_axis_labels_are_chinese)
{
    /* the plots are for the Chinese tutorial's readers, yet saturation.png
     * labelled its axes "step", "loss", "gradient norm (log)" and
     * "entropy (nats)", and variance.png "d_k" and "Var": every axis
     * label must carry Chinese, as the other plots' do */
    char cmd[1024], *out;
    snprintf(cmd, sizeof cmd,
             "grep -h 'set [xyz]2\\{0,1\\}label' '%s/../../scripts/plots/'*.gp "
             "| grep -o '\"[^\"]*\"' | grep -v '^\"\"$' | LC_ALL=C grep -v '[^ -~]'",
             QKV_TEST_DATA);
    sh(cmd, &out);
    ck_assert_msg(out[0] == '\0', "labels without Chinese:\n%s", out);
    free(out);
}
END_TEST

/* Shell commands, into buf, that copy the plot scripts to s/ and make
 * each of files (paths under s/plots, a glob allowed) show what (a
 * gnuplot setting) before each of its plot commands. */
static const char *plots_showing(char *buf, size_t len, const char *what, const char *files)
{
    snprintf(buf, len,
             "mkdir s && cp -r '%s/../../scripts/plots.sh' '%s/../../scripts/plots' s/ && "
             "for f in %s; do sed 's/^\\( *\\)plot /\\1show %s; plot /' \"$f\" >s/t && "
             "mv s/t \"$f\"; done",
             QKV_TEST_DATA, QKV_TEST_DATA, files, what);
    return buf;
}

START_TEST(test_plot_panels_label_their_y_axes)
{
    /* ablate.png's three panels, softmax.png's two and softmax_base.png's
     * left one had no y-axis label: what the bars measure was left to the
     * titles. A copy of the scripts shows the y label before each plot
     * command; saturation.png labels only its first column (each row's
     * label holds for the row) and is left out */
    char cmd[1024], copy[512], *out;
    snprintf(cmd, sizeof cmd,
             "%s && sh s/plots.sh '%s/plots' png loss variance "
             "heatmap softmax distance bptt parallel ablate softmax_base",
             plots_showing(copy, sizeof copy, "ylabel", "s/plots/*.gp"), QKV_TEST_DATA);
    int rc = sh(cmd, &out);
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, out);
    ck_assert_msg(strstr(out, "ylabel is \"") != NULL, "no y label shown:\n%s", out);
    ck_assert_msg(strstr(out, "ylabel is \"\"") == NULL, "a panel without a y label:\n%s", out);
    ck_assert_msg(strstr(out, "plots: wrote png/softmax_base.png") != NULL, "%s", out);
    free(out);
}
END_TEST

START_TEST(test_saturation_plot_says_where_a_gradient_is_exactly_0)
{
    /* a gradient norm of exactly 0 (the softmax saturated past float's
     * range, as unscaled d_k = 512 gives at one logged step) has no place
     * on the log axis: the line broke there with nothing to say why. The
     * panel that has one now says how many; the others say nothing. A
     * copy of the scripts shows label 1 before each plot command, on the
     * fixture's runs with one norm set to 0 */
    char cmd[1536], copy[512], *out;
    snprintf(cmd, sizeof cmd,
             "%s && mkdir d && cp -r '%s/plots/saturation' d/ && "
             "awk -F, -v OFS=, 'NR == 2 {$11 = 0} {print}' d/saturation/runs.csv >d/t && "
             "head -2 d/t | tail -1 | cut -d, -f1-3 && mv d/t d/saturation/runs.csv && "
             "sh s/plots.sh d png saturation",
             plots_showing(copy, sizeof copy, "label", "s/plots/saturation.gp"), QKV_TEST_DATA);
    int rc = sh(cmd, &out);
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, out);
    ck_assert_msg(strstr(out, "plots: wrote png/saturation.png") != NULL, "%s", out);
    /* the zeroed row's d_k, scaled and seed came first in the output */
    int dk = -1;
    ck_assert_int_eq(sscanf(out, "%d,", &dk), 1);
    const char *hit = strstr(out, "断开处梯度恰为 0（1 处）");
    ck_assert_msg(hit != NULL, "no panel names the zero:\n%s", out);
    ck_assert_msg(strstr(hit + 1, "断开处梯度恰为 0") == NULL, "named twice:\n%s", out);
    free(out);
}
END_TEST

START_TEST(test_ablate_plot_cuts_its_bars_at_an_accuracys_bounds)
{
    /* ablate.png drew mean ± sd as it came: the roles panel's no-v-concat
     * (0.909 ± 0.108 in the fixture, as in make run) reached 1.017, past
     * an accuracy's bound, where distance.png cuts its bars at 0 and 1. A
     * copy of the scripts writes each of its plots as a table too (x, the
     * mean, the bar's low and high ends); a bar whose mean is at most 1
     * (an accuracy; the steps' panel holds tens) must stay in [0, 1], and
     * no bar may go below 0 */
    char cmd[1024], *out;
    snprintf(cmd, sizeof cmd,
             "mkdir s && cp -r '%s/../../scripts/plots.sh' '%s/../../scripts/plots' s/ && "
             "sed \"s|^\\( *\\)plot |\\1set table '$PWD/tab' append; plot |\" s/plots/ablate.gp "
             ">s/t && mv s/t s/plots/ablate.gp && sh s/plots.sh '%s/plots' png ablate "
             ">/dev/null 2>&1; awk 'NF == 5 && $5 == \"i\" {n++} "
             "NF == 5 && $5 == \"i\" && ($3 < 0 || ($2 <= 1 && $4 > 1)) {print \"bar: \" $0} "
             "END {print n \" bars\"}' tab",
             QKV_TEST_DATA, QKV_TEST_DATA, QKV_TEST_DATA);
    int rc = sh(cmd, &out);
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, out);
    /* 9 variants in each of the coref panels' 4 series, 3 in the roles' 3 */
    ck_assert_msg(strstr(out, "45 bars") != NULL, "not every bar was tabulated:\n%s", out);
    ck_assert_msg(strstr(out, "bar: ") == NULL, "a bar past its bounds:\n%s", out);
    free(out);
}
END_TEST

/* The occurrences of needle in s. */
static int count_of(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(s, needle); p != NULL; p = strstr(p + 1, needle))
        n++;
    return n;
}

START_TEST(test_log_axes_over_many_decades_have_no_clumped_minor_tics)
{
    /* gnuplot puts a log axis's minor tics at 2..9 times each major;
     * past 9 decades its majors skip decades and those tics clumped just
     * above each major (bptt.png, saturation.png's d_k = 512 gradient
     * panel). Such an axis now has none; a narrower one keeps them. A
     * copy of the scripts shows mytics before each plot command: bptt's
     * fixture spans 10^-8 to 10^3 in every panel; saturation's gradients
     * span 2 decades, until one norm of the first row is set to 1e-30
     * (the parentheses: sh()'s 2>&1 is for the whole chain) */
    char cmd[2048], copy[512], *out;
    snprintf(cmd, sizeof cmd,
             "(%s && mkdir d && cp -r '%s/plots/bptt' '%s/plots/saturation' d/ && "
             "sh s/plots.sh d png bptt saturation && echo '== deep' && "
             "awk -F, -v OFS=, 'NR == 2 {$11 = 1e-30} {print}' d/saturation/runs.csv >d/t && "
             "mv d/t d/saturation/runs.csv && sh s/plots.sh d png saturation)",
             plots_showing(copy, sizeof copy, "mytics", "s/plots/bptt.gp s/plots/saturation.gp"),
             QKV_TEST_DATA, QKV_TEST_DATA);
    int rc = sh(cmd, &out);
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, out);
    const char *none = "drawn with 1 subintervals"; /* else gnuplot's defaults */
    char *deep = strstr(out, "== deep");
    ck_assert_msg(deep != NULL, "%s", out);
    *deep = '\0';
    /* bptt's three panels have none, saturation's gradient panels theirs;
     * then the deep panel has none and the other its own */
    ck_assert_msg(count_of(out, none) == 3, "bptt and saturation:\n%s", out);
    ck_assert_msg(count_of(deep + 1, none) == 1, "the deep panel:\n%s", deep + 1);
    free(out);
}
END_TEST

START_TEST(test_heatmap_of_a_one_token_sentence_is_drawn)
{
    /* `qkv resolve --csv` of a one-token sentence writes a 1x1 matrix,
     * and heatmap.png came out blank, exit 0, with gnuplot's "Image grid
     * must be at least 4 points" */
    char cmd[1024], *out;
    snprintf(cmd, sizeof cmd,
             "mkdir -p d && printf 'query\\\\key,他\\n他,1.000000\\n' >d/heatmap.csv && "
             "sh '%s/../../scripts/plots.sh' d png heatmap",
             QKV_TEST_DATA);
    int rc = sh(cmd, &out);
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, out);
    ck_assert_msg(strstr(out, "plots: wrote png/heatmap.png") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "arning") == NULL, "%s", out);
    free(out);
}
END_TEST

START_TEST(test_bptt_plot_draws_every_rho_qkv_bptt_takes)
{
    /* `qkv bptt --rho` takes up to 16 values, but bptt.gp's palette had 7
     * colours: from the 8th rho on gnuplot stopped with "unrecognized
     * color name" and bptt.png was not drawn */
    char cmd[1024], *out;
    snprintf(cmd, sizeof cmd,
             "mkdir -p d/bptt && awk 'BEGIN { print \"model,rho,activation,steps_back,grad_norm\"; "
             "for (r = 1; r <= 16; r++) for (a = 0; a < 2; a++) for (j = 0; j < 4; j++) "
             "printf \"rnn,%%g,%%s,%%d,%%g\\n\", r / 8, a ? \"tanh\" : \"linear\", j, "
             "(r / 8) ^ j; "
             "for (j = 0; j < 4; j++) printf \"rnn-init,,,%%d,%%g\\nlstm-init,,,%%d,%%g\\n\", "
             "j, 0.5 ^ j, j, 0.9 ^ j }' >d/bptt/grads.csv && "
             "sh '%s/../../scripts/plots.sh' d png bptt",
             QKV_TEST_DATA);
    int rc = sh(cmd, &out);
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, out);
    ck_assert_msg(strstr(out, "plots: wrote png/bptt.png") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "bptt.gp") == NULL, "%s", out); /* no gnuplot message */
    free(out);
}
END_TEST

START_TEST(test_saturation_says_a_run_diverged_instead_of_nan)
{
    /* a run whose loss stops being finite has no final accuracy, and the
     * table printed "nan | nan" for it, exit 0, with no word of why (in
     * float: double has the range to keep these runs finite) */
#ifdef QKV_DOUBLE
    return;
#endif
    char *out;
    int rc = run("saturation --quiet --dk 2 --steps 3 --lr 1e300 --no-variance --out s", &out);
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, out);
    ck_assert_msg(strstr(out, "nan") == NULL, "%s", out);
    ck_assert_msg(strstr(out, "diverged | diverged") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "try a smaller --lr") != NULL, "%s", out);
    /* the first update overflows, which the optimizer refuses: no row 0,
     * so no values at init (the cells printed whatever the stack held,
     * "0 | -1.40e+306" once) */
    ck_assert_msg(strstr(out, "    2  - | -              - | -            - | -   ") != NULL, "%s",
                  out);
    ck_assert_msg(strstr(out, "\n2 of them diverged at their first step, and have no values at "
                              "init either\n") != NULL,
                  "%s", out);
    free(out);
    /* stopped by a gradient that is not finite, with the weights still
     * finite (the optimizer refused the step): diverged too */
    rc = run("saturation --quiet --dk 2 --steps 3 --lr 1e30 --log-every 1 --no-variance --out s",
             &out);
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, out);
    ck_assert_msg(strstr(out, "diverged | diverged") != NULL, "%s", out);
    free(out);
}
END_TEST

START_TEST(test_softmax_states_its_limit_on_vectors)
{
    /* a ninth vector was "unexpected argument '9'", the limit of 8 stated
     * nowhere */
    expect("softmax 1 2 3 4 5 6 7 8 9", 2, "qkv: softmax takes at most 8 vectors, not 9\n");
    expect("softmax 1 2 3 4 5 6 7 8 9 10 11", 2, "at most 8 vectors, not 11\n");
    expect("softmax --help", 0, "at most 8 VECTORs");
    expect("softmax 1 2 3 4 5 6 7 8", 0, "z = [8]");
}
END_TEST

START_TEST(test_softmax_takes_a_base_of_any_reasonable_length)
{
    /* a base of more than 15 characters (e to double precision) was "not
     * a list of up to 4 distinct bases": the item buffer held 16 bytes */
    expect("softmax --base 2.718281828459045 1,2", 0, "2.718281828459045^z/Σ2.718281828459045^z");
    expect("softmax --base 2,2.00000000000000 1,2", 2, "is not a list of up to 4 distinct bases");
    expect("softmax --base 10,2.00000000000000 --csv b.csv 1,2", 0, "2.00000000000000^z");
    char *out;
    ck_assert_int_eq(sh("head -1 b.csv", &out), 0);
    ck_assert_str_eq(out, "vector,i,z,linear,softmax,base_10,base_2.00000000000000\n");
    free(out);
    /* up to 64 characters; one more is named too long */
    char args[256], zeros[80];
    memset(zeros, '0', 62);
    zeros[62] = '\0';
    snprintf(args, sizeof args, "softmax --base 3.%s 1,2", zeros); /* 64 characters */
    expect(args, 0, "0^z/Σ3.0");
    char want[256];
    snprintf(args, sizeof args, "softmax --base e,3.%s0 1,2", zeros);
    snprintf(want, sizeof want, "--base: the base '3.%s0' is longer than 64 characters", zeros);
    expect(args, 2, want);
}
END_TEST

/* Runs `qkv ARGS` (softmax without --base) and checks that every row of
 * each table, less its "<- ..." note, is as wide as the table's header:
 * no number overflows its column. */
static void expect_softmax_rows_fit(const char *args)
{
    char *out;
    ck_assert_int_eq(run(args, &out), 0);
    int rows = 0, width = -1;
    char *save = NULL;
    for (char *l = strtok_r(out, "\n", &save); l != NULL; l = strtok_r(NULL, "\n", &save)) {
        if (strncmp(l, "z = ", 4) == 0) {
            width = -1;
            continue;
        }
        char *note = strstr(l, "   <- ");
        if (note != NULL)
            *note = '\0';
        if (width < 0) {
            width = cli_text_width(l);
            continue;
        }
        ck_assert_msg(cli_text_width(l) == width, "qkv %s: '%s' is %d columns wide, not %d", args,
                      l, cli_text_width(l), width);
        rows++;
    }
    ck_assert_int_ge(rows, 3);
    free(out);
}

START_TEST(test_softmax_huge_linear_weights_keep_their_column)
{
    /* z/Σz of 3e38 over Σz = 1 printed all 39 digits, "%.4f", and pushed
     * the row out of line; a huge value is now in e-notation, as is a z
     * too wide for its column, and a tiny one */
    expect_softmax_rows_fit("softmax 3e38,-3e38,1 1,-1,1e-30 -1.234567e-30,1");
    /* 3e38/1, -3e38/1, 1/1; 1/1e-30 = 1e30; the z of -1.234567e-30 */
    expect("softmax 3e38,-3e38,1", 0, "    0      3e+38    3.000e+38");
    expect("softmax 3e38,-3e38,1", 0, "    1     -3e+38   -3.000e+38");
    expect("softmax 3e38,-3e38,1", 0, "    2          1       1.0000");
    expect("softmax 1,-1,1e-30", 0, "    0          1    1.000e+30");
    expect("softmax 1,-1,1e-30", 0, "    1         -1   -1.000e+30");
    /* and a weight that is not 0 shows more than "-0.0000" */
    expect("softmax -1.234567e-30,1", 0, "    0 -1.235e-30   -1.235e-30");
}
END_TEST

START_TEST(test_softmax_plot_keeps_a_long_vectors_title_to_its_panel)
{
    /* qkv softmax takes up to 32 numbers; a panel titled with all of them
     * ran into the next panel's title, and its 32 tick labels into each
     * other */
    char cmd[1024], *out;
    snprintf(cmd, sizeof cmd,
             "'%s' softmax --csv s.csv 1,2 "
             "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30 "
             ">/dev/null && gnuplot -e \"dir='%s/../../scripts/plots'; infile='s.csv'; "
             "outfile='s.png'; vecs='1;2 "
             "1;2;3;4;5;6;7;8;9;10;11;12;13;14;15;16;17;18;19;20;21;22;23;24;25;26;27;28;29;30'\" "
             "'%s/../../scripts/plots/softmax.gp' -e 'show title'",
             QKV_BIN, QKV_TEST_DATA, QKV_TEST_DATA);
    ck_assert_int_eq(sh(cmd, &out), 0);
    /* written with commas, as the tutorial writes a vector, and cut
     * after a whole number */
    ck_assert_msg(strstr(out, "title is \"z = [1, 2, 3, 4, 5, 6, 7, 8, 9, …]\"") != NULL, "%s",
                  out);
    free(out);
}
END_TEST

START_TEST(test_ablate_header_states_the_d_k_it_trained)
{
    /* the coref header ended in "; d_k as --d-k", the same words whatever
     * --d-k was, so a run at --d-k 4 never said so */
    expect("ablate --d-k 4 --variants full --steps 10 --eval-every 5 --seeds 1 --quiet --out a", 0,
           "1 seed from 1; d_k 4\n");
}
END_TEST

START_TEST(test_ablate_roles_refuses_d_k_rather_than_ignore_it)
{
    /* --d-k sets the coref layer's width; with --task roles it was taken
     * and silently ignored, and the run trained the fixed 16-wide heads */
    expect("ablate --task roles --d-k 8 --steps 10 --eval-every 5 --seeds 1 --quiet --out r", 2,
           "qkv: --d-k is for --task coref; the roles task's widths are fixed");
    expect("ablate --d-k 8 --variants full --steps 10 --eval-every 5 --seeds 1 --quiet --out c", 0,
           "; d_k 8\n");
}
END_TEST

START_TEST(test_heatmap_title_keeps_a_long_sentence_on_the_page)
{
    /* resolve takes up to 48 tokens, and heatmap.png put the whole
     * sentence in its title, which then ran off both edges of the image */
    char cmd[1024], *out;
    snprintf(cmd, sizeof cmd,
             "'%s' train --quiet --steps 2 --save m.st --log l.csv >/dev/null && '%s' resolve "
             "--model m.st --csv h.csv "
             "\"小红和阿杰是朋友，他爱打篮球，她喜欢唱歌，小明是个运动达人，他平时很爱打篮球\" "
             ">/dev/null && gnuplot -e \"dir='%s/../../scripts/plots'; infile='h.csv'; "
             "outfile='h.png'\" '%s/../../scripts/plots/heatmap.gp' -e 'show title'",
             QKV_BIN, QKV_BIN, QKV_TEST_DATA, QKV_TEST_DATA);
    ck_assert_int_eq(sh(cmd, &out), 0);
    ck_assert_msg(strstr(out, "title is \"注意力权重：「小红和阿杰是朋友，他爱打篮球，她喜欢唱歌，"
                              "小明是个运动达……」（行：查询 Q，列：键 K）\"") != NULL,
                  "%s", out);
    free(out);
}
END_TEST

START_TEST(test_softmax_base_plot_takes_the_bases_in_any_order)
{
    /* plots.sh looked for the header text "base_2,base_e,base_10", so
     * after qkv softmax --base 10,2,e (the same columns in another order)
     * it skipped softmax_base.png, saying the bases were missing */
    char cmd[1024], *out;
    snprintf(cmd, sizeof cmd,
             "mkdir -p d/ablate && cp '%s/plots/ablate/curves.csv' d/ablate/ && "
             "'%s' softmax --base 10,2,e --csv d/softmax.csv >/dev/null && "
             "sh '%s/../../scripts/plots.sh' d png",
             QKV_TEST_DATA, QKV_BIN, QKV_TEST_DATA);
    sh(cmd, &out);
    ck_assert_msg(strstr(out, "plots: wrote png/softmax_base.png") != NULL, "%s", out);
    free(out);
}
END_TEST

START_TEST(test_bptt_prints_the_radius_it_was_given)
{
    /* --rho takes any radius in (0, 10], and the table printed it with two
     * decimals: rho 0.001 read "0.00" and 0.005 "0.01" */
    char *out;
    int rc = run("bptt --quiet --rho 0.001,0.005,0.5 --train-steps 0 --batch 2 --out b", &out);
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, out);
    ck_assert_msg(strstr(out, "rnn          linear     0.001 ") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "rnn          linear     0.005 ") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "rnn          linear      0.50 ") != NULL, "%s", out);
    free(out);
}
END_TEST

/* softmax checked each vector only when it reached it: a bad one after a
 * good one printed the good one's table, then exited 2 with the CSV left
 * holding the good rows alone; and a run that failed (out of memory)
 * kept its CSV cut short. Now every vector is checked before anything is
 * written, and a failed run leaves the last whole CSV as it was. */
START_TEST(test_softmax_linear_weight_of_zero_has_no_sign)
{
    /* 0/(-5) is -0 in IEEE arithmetic, which printed as -0.0000 (and -0
     * in the CSV): a "negative" weight of nothing. z = [0,-5]: Σz = -5,
     * z/Σz = 0 and 1. */
    char *out;
    ck_assert_int_eq(run("softmax --csv s.csv -- 0,-5", &out), 0);
    ck_assert_msg(strstr(out, "-0.0000") == NULL && strstr(out, " 0.0000") != NULL, "%s", out);
    free(out);
    ck_assert_int_eq(sh("cat s.csv", &out), 0);
    ck_assert_str_eq(out, "vector,i,z,linear,softmax\n"
                          "0;-5,0,0,0,0.993307\n"
                          "0;-5,1,-5,1,0.00669285\n");
    free(out);
}
END_TEST

START_TEST(test_softmax_checks_every_vector_before_it_writes)
{
    char *out;
    ck_assert_int_eq(run("softmax --csv d/a.csv 1,2 zz", &out), 2);
    ck_assert_msg(strstr(out, "'zz' is not a list") != NULL && strstr(out, "z = [") == NULL, "%s",
                  out);
    free(out);
#ifdef QKV_DOUBLE
    ck_assert_int_eq(run("softmax --base 10 --csv d/b.csv 1,2 1e308,1", &out), 2);
#else
    ck_assert_int_eq(run("softmax --base 10 --csv d/b.csv 1,2 3e38,1", &out), 2);
#endif
    ck_assert_msg(strstr(out, "is too large for the scalar type") != NULL &&
                      strstr(out, "z = [") == NULL,
                  "%s", out);
    free(out);
    char path[160];
    snprintf(path, sizeof path, "%s/d", tmp);
    ck_assert_msg(access(path, F_OK) != 0, "a usage error made %s", path);
    expect("softmax --csv d/c.csv", 0, "z = [1,2,3]");
    snprintf(path, sizeof path, "%s/d/c.csv", tmp);
    char *whole = slurp_path(path);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "QKV_TEST_ALLOC_FAIL=1 '%s' softmax --csv d/c.csv", QKV_BIN);
    ck_assert_int_eq(sh(cmd, &out), 1);
    ck_assert_msg(strstr(out, "out of memory") != NULL, "%s", out);
    free(out);
    /* the last whole table stays, and nothing of the new one */
    char *kept = slurp_path(path);
    ck_assert_str_eq(kept, whole);
    free(kept);
    free(whole);
}
END_TEST

/* Writes a safetensors file by hand in tmp: the 8-byte length, the
 * header, then n bytes of data. */
static void write_st(const char *name, const char *header, const void *data, size_t n)
{
    char p[160];
    snprintf(p, sizeof p, "%s/%s", tmp, name);
    FILE *f = fopen(p, "wb");
    ck_assert_ptr_nonnull(f);
    const uint64_t h = strlen(header);
    for (int k = 0; k < 8; k++)
        fputc((int)(h >> (8 * k)) & 0xff, f);
    fputs(header, f);
    if (n > 0)
        ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

/* w.st in tmp: w [2,3] = 1, -2, 3, -4, 5, -6 and b [3] = 0.5, 0.5, 2,
 * with a note in Chinese and a key and value with control characters. */
static void write_inspect_file(void)
{
    qkv_params *p = qkv_params_new(1, NULL);
    const qkv_init z = {QKV_INIT_ZEROS, 0, 0};
    qkv_tensor *w = qkv_params_add(p, "w", 2, (const int[]){2, 3}, z, NULL);
    qkv_tensor *b = qkv_params_add(p, "b", 1, (const int[]){3}, z, NULL);
    const double wv[6] = {1, -2, 3, -4, 5, -6}, bv[3] = {0.5, 0.5, 2};
    for (int i = 0; i < 6; i++)
        w->data[i] = (qkv_real)wv[i];
    for (int i = 0; i < 3; i++)
        b->data[i] = (qkv_real)bv[i];
    const qkv_meta_entry meta[2] = {{"note", "他"}, {"line\nbreak", "a\033b"}};
    char path[160];
    snprintf(path, sizeof path, "%s/w.st", tmp);
    qkv_error err = qkv_error_none();
    ck_assert_msg(qkv_safetensors_save(p, path, meta, 2, &err) == QKV_OK, "%s", err.message);
    qkv_params_free(p);
}

#ifdef QKV_DOUBLE
#define ST_DTYPE "F64"
#else
#define ST_DTYPE "F32"
#endif

/* The statistics are by hand: w's mean is (1 - 2 + 3 - 4 + 5 - 6) / 6 =
 * -0.5 and its RMS sqrt(91 / 6) = 3.894440...; b's mean is 3 / 3 = 1 and
 * its RMS sqrt(4.5 / 3) = 1.224744... */
START_TEST(test_inspect_shows_metadata_and_each_tensors_statistics)
{
    write_inspect_file();
    char *out;
    ck_assert_int_eq(run("inspect w.st", &out), 0);
    static const char *const lines[] = {
        "w.st: 2 tensors, 9 values, 4 metadata entries\n\nmetadata:\n  qkv_format = 1\n",
        "  note = 他\n  line\\x0abreak = a\\x1bb\n\n",
        "tensor  dtype  shape  values           min           max          mean           rms\n",
        "w       " ST_DTYPE "    [2,3]       6            -6             5          -0.5       "
        "3.89444\n",
        "b       " ST_DTYPE "    [3]         3           0.5             2             1       "
        "1.22474\n",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        ck_assert_msg(strstr(out, lines[i]) != NULL, "no '%s' in:\n%s", lines[i], out);
    ck_assert_ptr_null(strchr(out, '\033')); /* escaped, never sent to the terminal */
    free(out);
    /* its values: a matrix as its rows, a vector on a line, each column
     * as wide as the widest value */
    ck_assert_int_eq(run("inspect w.st --values w", &out), 0);
    ck_assert_str_eq(out, " 1 -2  3\n-4  5 -6\n");
    free(out);
    ck_assert_int_eq(run("inspect --values=b w.st", &out), 0);
    ck_assert_str_eq(out, "0.5 0.5   2\n");
    free(out);
    expect("inspect w.st --values nope", 1,
           "qkv: inspect: w.st has no tensor 'nope'; its tensors are w, b\n");
}
END_TEST

/* A file by hand: a scalar, a 3-D tensor, an empty F64 one and one with a
 * NaN. The table shows every tensor, "-" for the empty one's statistics
 * and "?" for the one that cannot be read, which is then named on a line
 * of its own; the command fails. t's RMS is sqrt(30 / 4) = 2.738613. */
START_TEST(test_inspect_shows_what_it_cannot_read_and_fails)
{
    const float v[8] = {2.5f, 1, 2, 3, 4, 1, NAN, 3};
    write_st("nan.st",
             "{\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
             "\"t\":{\"dtype\":\"F32\",\"shape\":[2,1,2],\"data_offsets\":[4,20]},"
             "\"e\":{\"dtype\":\"F64\",\"shape\":[2,0],\"data_offsets\":[20,20]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[20,32]}}",
             v, 32);
    char *out;
    ck_assert_int_eq(run("inspect nan.st", &out), 1);
    static const char *const lines[] = {
        "nan.st: 4 tensors, 8 values, 0 metadata entries\n\ntensor  dtype  shape    values  ",
        "tensor  dtype  shape    values           min           max          mean           rms\n",
        "s       F32    []            1           2.5           2.5           2.5           2.5\n",
        "t       F32    [2,1,2]       4             1             4           2.5       2.73861\n",
        "e       F64    [2,0]         0             -             -             -             -\n",
        "b       F32    [3]           3             ?             ?             ?             ?\n",
        "qkv: inspect: nan.st: tensor 'b' value 1 is NaN, not a finite number\n",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        ck_assert_msg(strstr(out, lines[i]) != NULL, "no '%s' in:\n%s", lines[i], out);
    free(out);
    ck_assert_int_eq(run("inspect nan.st --values s", &out), 0);
    ck_assert_str_eq(out, "2.5\n");
    free(out);
    ck_assert_int_eq(run("inspect nan.st --values t", &out), 0); /* rows of the last dimension */
    ck_assert_str_eq(out, "1 2\n3 4\n");
    free(out);
    ck_assert_int_eq(run("inspect nan.st --values e", &out), 0);
    ck_assert_str_eq(out, "");
    free(out);
    expect("inspect nan.st --values b", 1,
           "qkv: inspect: nan.st: tensor 'b' value 1 is NaN, not a finite number\n");
    /* F64 values near the double's largest: their sum and squares
     * overflow, their mean and RMS do not (the float build refuses them,
     * as its loader does) */
    const double big[2] = {1e308, 1e308};
    write_st("big.st", "{\"x\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", big,
             16);
#ifdef QKV_DOUBLE
    expect(
        "inspect big.st", 0,
        "x       F64    [2]         2        1e+308        1e+308        1e+308        1e+308\n");
#else
    expect("inspect big.st", 1,
           "qkv: inspect: big.st: tensor 'x' value 0 (1e+308) is beyond F32's range");
#endif
}
END_TEST

/* Shapes of any rank the reader takes: a 5-D tensor shows its whole
 * shape and its values as rows of its last dimension, and an empty one
 * a dimension past INT_MAX (1..6: mean 3.5, RMS sqrt(91/6) = 3.89444). */
START_TEST(test_inspect_shows_shapes_past_four_dimensions)
{
    const float v[6] = {1, 2, 3, 4, 5, 6};
    write_st("rank.st",
             "{\"x\":{\"dtype\":\"F32\",\"shape\":[1,1,1,2,3],\"data_offsets\":[0,24]},"
             "\"e\":{\"dtype\":\"F32\",\"shape\":[0,4294967296],\"data_offsets\":[24,24]}}",
             v, 24);
    char *out;
    ck_assert_int_eq(run("inspect rank.st", &out), 0);
    /* the shape column as wide as its longest, 14, then the count in 6 */
    static const char *const parts[] = {
        "x       F32    [1,1,1,2,3]          6             1             6"
        "           3.5       3.89444\n",
        "e       F32    [0,4294967296]       0             -"};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        ck_assert_msg(strstr(out, parts[i]) != NULL, "no '%s' in:\n%s", parts[i], out);
    ck_assert_msg(strstr(out, "?") == NULL, "a shape unknown in:\n%s", out);
    free(out);
    ck_assert_int_eq(run("inspect rank.st --values x", &out), 0);
    ck_assert_str_eq(out, "1 2 3\n4 5 6\n");
    free(out);
}
END_TEST

/* A file that cannot be read is one line naming it, the loader's; a
 * command line without one file is a usage error. */
START_TEST(test_inspect_names_the_file_it_cannot_read)
{
    char *out;
    expect("inspect nowhere.st", 1,
           "qkv: inspect: cannot open nowhere.st: No such file or directory\n");
    ck_assert_int_eq(sh("printf 'hello, world\\n' > notes.txt && mkdir d", &out), 0);
    free(out);
    expect("inspect notes.txt", 1, "qkv: inspect: notes.txt is not a safetensors file");
    expect("inspect ./d", 1, "qkv: inspect: ./d is a directory, not a file\n");
    write_st("cut.st", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
             "\0\0\0\0", 4);
    expect("inspect cut.st", 1, "qkv: inspect: cut.st: tensor 'x' ends at data byte 8, past");
    expect("inspect", 2, "qkv: give one safetensors file");
    expect("inspect a.st b.st", 2, "qkv: unexpected argument 'b.st'\nTry 'qkv inspect --help'.\n");
    expect("inspect -", 2, "'-' is not standard input here");
    expect("inspect d/", 2, "qkv: 'd/' names a directory, not a file\n");
    expect("inspect notes.txt --values", 2, "qkv: --values needs a value");
    expect("inspect --help", 0, "Usage: qkv inspect [--values NAME] FILE\n");
}
END_TEST

Suite *cli_suite(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("program");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_every_command_has_help);
    tcase_add_test(tc, test_top_level_help_fits_80_columns);
    tcase_add_test(tc, test_inspect_shows_metadata_and_each_tensors_statistics);
    tcase_add_test(tc, test_inspect_shows_what_it_cannot_read_and_fails);
    tcase_add_test(tc, test_inspect_names_the_file_it_cannot_read);
    tcase_add_test(tc, test_inspect_shows_shapes_past_four_dimensions);
    tcase_add_test(tc, test_usage_errors_exit_2_with_a_message);
    tcase_add_test(tc, test_train_defaults_reach_the_accuracy_then_eval_and_resolve);
    tcase_add_test(tc, test_parallel_flushes_denormals_on_request);
    tcase_add_test(tc, test_a_new_csv_never_writes_through_a_planted_link);
    tcase_add_test(tc, test_resolve_without_a_model_says_to_train);
    tcase_add_test(tc, test_a_default_model_blocked_by_a_file_is_not_missing);
    tcase_add_test(tc, test_a_long_path_keeps_the_reason_in_the_message);
    tcase_add_test(tc, test_resolve_lists_the_words_it_knows);
    tcase_add_test(tc, test_distance_rnn_and_attention_resolve_adjacent_pronouns);
    tcase_add_test(tc, test_distance_is_the_same_on_any_number_of_jobs);
    tcase_add_test(tc, test_distance_scores_long_sentences_in_small_batches);
    tcase_add_test(tc, test_distance_steps_to_90_counts_the_seeds_that_got_there);
    tcase_add_test(tc, test_ablate_is_the_same_on_any_number_of_jobs);
    tcase_add_test(tc, test_ablate_fails_the_same_on_any_number_of_jobs);
    tcase_add_test(tc, test_ablate_names_the_gradient_the_optimizer_refused);
    tcase_add_test(tc, test_ablate_shared_qk_looks_at_itself_and_noself_stops_it);
    tcase_add_test(tc, test_softmax_in_base_b_is_b_to_the_z_over_its_sum);
    tcase_add_test(tc, test_bptt_a_linear_recurrence_scales_the_gradient_by_rho_per_step);
    tcase_add_test(tc, test_bptt_table_header_lines_up_with_its_rows);
    tcase_add_test(tc, test_significant_digits_keep_trailing_zeros);
    tcase_add_test(tc, test_saturation_table_columns_line_up);
    tcase_add_test(tc, test_parallel_rnn_paths_grow_with_t_and_attentions_do_not);
    tcase_add_test(tc, test_divergence_stops_and_keeps_the_last_checkpoint);
    tcase_add_test(tc, test_saturation_is_deterministic_for_a_seed_and_any_thread_count);
    tcase_add_test(tc, test_every_gnuplot_script_renders_a_png_from_fixtures);
    tcase_add_test(tc, test_make_runs_script_fails_with_a_background_jobs_status);
    tcase_add_test(tc, test_make_runs_script_interrupted_stops_its_jobs_and_cleans_up);
    tcase_add_test(tc, test_readme_c_snippets_are_compiled_example_code);
    tcase_add_test(tc, test_readme_says_which_examples_build_only_in_the_source_tree);
    tcase_add_test(tc, test_csv_create_makes_directories_and_writes_the_header);
    tcase_add_test(tc, test_a_program_built_for_the_other_scalar_type_fails_clearly);
    tcase_add_test(tc, test_plots_read_columns_by_header_name);
    tcase_add_test(tc, test_every_example_runs_to_its_result);
    tcase_add_test(tc, test_examples_without_arguments_refuse_one_and_explain_on_help);
    tcase_add_test(tc, test_transformer_checks_its_weights_path_before_it_trains);
    tcase_add_test(tc, test_a_full_stdout_is_a_failure);
    tcase_add_test(tc, test_plots_on_a_full_disk_fail);
    tcase_add_test(tc, test_plots_interrupted_leave_no_png_cut_short);
    tcase_add_test(tc, test_a_csv_cut_short_by_a_full_disk_is_removed);
    tcase_add_test(tc, test_a_csv_write_failure_gives_the_first_failures_reason);
    tcase_add_test(tc, test_a_diverged_run_keeps_the_good_checkpoint);
    tcase_add_test(tc, test_a_diverged_run_calls_untouched_only_the_files_that_were_there);
    tcase_add_test(tc, test_a_nan_in_a_csv_log_is_written_nan);
    tcase_add_test(tc, test_a_negative_zero_option_is_zero);
    tcase_add_test(tc, test_no_negative_zero_or_wrong_plural_in_tables);
    tcase_add_test(tc, test_saturation_rows_measure_one_set_of_weights);
    tcase_add_test(tc, test_a_csv_with_two_names_is_written_through_both);
    tcase_add_test(tc, test_train_refuses_an_unwritable_save_before_it_trains);
    tcase_add_test(tc, test_an_interrupted_run_leaves_no_csv_cut_short);
    tcase_add_test(tc, test_a_worker_killed_alone_is_named);
    tcase_add_test(tc, test_workers_end_when_their_parent_is_killed);
    tcase_add_test(tc, test_an_interrupted_run_keeps_a_link_it_writes_through);
    tcase_add_test(tc, test_a_csv_sent_where_standard_output_goes_keeps_both);
    tcase_add_test(tc, test_a_csv_of_another_user_keeps_its_owner);
    tcase_add_test(tc, test_train_names_a_usage_error_before_its_files);
    tcase_add_test(tc, test_train_names_a_file_in_the_way_of_its_logs_directory);
    tcase_add_test(tc, test_train_names_a_log_directory_that_takes_no_file);
    tcase_add_test(tc, test_input_is_parsed_strictly_and_limits_agree);
    tcase_add_test(tc, test_a_file_option_naming_a_directory_fails_by_its_spelling_or_the_disk);
    tcase_add_test(tc, test_an_out_option_naming_a_file_fails_with_status_1);
    tcase_add_test(tc, test_a_refused_path_fails_alike_given_or_by_default);
    tcase_add_test(tc, test_resolve_names_an_empty_sentence_before_its_csv);
    tcase_add_test(tc, test_an_out_directory_with_a_trailing_slash_writes_no_double_slash);
    tcase_add_test(tc, test_each_directory_option_keeps_its_own_value);
    tcase_add_test(tc, test_a_checkpoint_is_held_to_the_options_bounds);
    tcase_add_test(tc, test_a_file_whose_size_says_0_is_read_to_its_end);
    tcase_add_test(tc, test_messages_escape_control_characters);
    tcase_add_test(tc, test_quoting_out_of_memory_is_no_memory_message);
    tcase_add_test(tc, test_memory_advice_follows_the_status_not_the_words);
    tcase_add_test(tc, test_ordinary_messages_escape_what_the_user_typed);
    tcase_add_test(tc, test_progress_bars_leave_the_tables_alone_on_a_terminal);
    tcase_add_test(tc, test_a_bar_fits_a_narrow_terminal);
    tcase_add_test(tc, test_train_refuses_a_log_that_is_not_a_regular_file);
    tcase_add_test(tc, test_a_failed_command_leaves_no_directory_behind);
    tcase_add_test(tc, test_a_failed_command_removes_the_directories_it_made);
    tcase_add_test(tc, test_an_interrupted_run_removes_the_directories_it_made);
    tcase_add_test(tc, test_made_directories_of_any_depth_go_and_no_other);
    tcase_add_test(tc, test_a_worker_killed_leaves_its_parents_outputs);
    tcase_add_test(tc, test_a_name_of_the_longest_length_is_taken_one_more_is_not);
    tcase_add_test(tc, test_a_csv_written_last_that_cannot_be_fails_before_the_work);
    tcase_add_test(tc, test_help_with_a_command_shows_that_commands_help);
    tcase_add_test(tc, test_help_lists_version);
    tcase_add_test(tc, test_distance_says_a_run_diverged);
    tcase_add_test(tc, test_distance_and_saturation_name_what_the_optimizer_refused);
    tcase_add_test(tc, test_distance_cells_leave_out_the_seeds_that_diverged);
    tcase_add_test(tc, test_distance_names_the_forget_bias_only_with_an_lstm);
    tcase_add_test(tc, test_parallel_runs_draw_their_last_count_once);
    tcase_add_test(tc, test_a_failed_parallel_run_leaves_no_bar);
    tcase_add_test(tc, test_heatmap_of_a_one_token_sentence_is_drawn);
    tcase_add_test(tc, test_bptt_plot_draws_every_rho_qkv_bptt_takes);
    tcase_add_test(tc, test_train_does_not_follow_a_link_at_its_part_log);
    tcase_add_test(tc, test_gradcheck_shows_the_tolerance_each_row_passed_at);
    tcase_add_test(tc, test_softmax_summary_rows_line_up_with_the_table);
    tcase_add_test(tc, test_an_option_has_one_limit_in_every_command);
    tcase_add_test(tc, test_bad_environment_values_are_usage_errors);
    tcase_add_test(tc, test_two_outputs_or_an_output_and_the_input_cannot_share_a_file);
    tcase_add_test(tc, test_train_refuses_a_checkpoint_at_its_logs_side_files);
    tcase_add_test(tc, test_a_failed_sweep_leaves_no_csv_cut_short);
    tcase_add_test(tc, test_a_short_run_takes_the_default_eval_interval);
    tcase_add_test(tc, test_parallel_names_its_thread_count);
    tcase_add_test(tc, test_dash_arguments_are_options_and_double_dash_ends_them);
    tcase_add_test(tc, test_an_option_value_that_reads_as_an_option_is_refused);
    tcase_add_test(tc, test_a_dash_for_a_file_or_directory_is_refused);
    tcase_add_test(tc, test_an_option_without_a_name_is_quoted_whole);
    tcase_add_test(tc, test_a_path_option_of_4000_bytes_is_taken);
    tcase_add_test(tc, test_a_flag_given_a_value_is_a_usage_error);
    tcase_add_test(tc, test_train_logs_the_mean_loss_of_its_steps);
    tcase_add_test(tc, test_adamw_with_no_weight_decay_is_adam);
    tcase_add_test(tc, test_resolve_says_when_the_name_is_not_in_the_sentence);
    tcase_add_test(tc, test_an_output_path_too_long_for_its_files_is_refused);
    tcase_add_test(tc, test_a_subnormal_number_is_a_number);
    tcase_add_test(tc, test_resolve_and_eval_refuse_a_model_whose_attention_overflows);
    tcase_add_test(tc, test_resolve_names_the_output_that_overflows);
    tcase_add_test(tc, test_ablate_plot_draws_a_run_where_no_variant_reached_90);
    tcase_add_test(tc, test_bptt_says_why_a_row_has_no_slope_instead_of_nan);
    tcase_add_test(tc, test_distance_names_pytorchs_forget_bias_in_its_header);
    tcase_add_test(tc, test_eval_rebuilds_the_splits_of_the_levels_trained_on);
    tcase_add_test(tc, test_parallel_plot_on_one_thread_names_no_second_count);
    tcase_add_test(tc, test_bptt_plot_without_training_lists_no_trained_lines);
    tcase_add_test(tc, test_softmax_base_plot_needs_the_base_variants);
    tcase_add_test(tc, test_plot_axis_labels_are_chinese);
    tcase_add_test(tc, test_plot_panels_label_their_y_axes);
    tcase_add_test(tc, test_saturation_plot_says_where_a_gradient_is_exactly_0);
    tcase_add_test(tc, test_ablate_plot_cuts_its_bars_at_an_accuracys_bounds);
    tcase_add_test(tc, test_log_axes_over_many_decades_have_no_clumped_minor_tics);
    tcase_add_test(tc, test_saturation_says_a_run_diverged_instead_of_nan);
    tcase_add_test(tc, test_softmax_plot_keeps_a_long_vectors_title_to_its_panel);
    tcase_add_test(tc, test_ablate_header_states_the_d_k_it_trained);
    tcase_add_test(tc, test_ablate_roles_refuses_d_k_rather_than_ignore_it);
    tcase_add_test(tc, test_heatmap_title_keeps_a_long_sentence_on_the_page);
    tcase_add_test(tc, test_softmax_base_plot_takes_the_bases_in_any_order);
    tcase_add_test(tc, test_bptt_prints_the_radius_it_was_given);
    tcase_add_test(tc, test_softmax_checks_every_vector_before_it_writes);
    tcase_add_test(tc, test_softmax_linear_weight_of_zero_has_no_sign);
    tcase_add_test(tc, test_softmax_states_its_limit_on_vectors);
    tcase_add_test(tc, test_softmax_takes_a_base_of_any_reasonable_length);
    tcase_add_test(tc, test_softmax_huge_linear_weights_keep_their_column);
    suite_add_tcase(s, tc);
    return s;
}
