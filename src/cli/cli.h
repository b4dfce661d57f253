/*
 * cli.h - what the qkv program's subcommands share: option parsing, error
 * reporting, the progress bar, and each subcommand's entry point.
 *
 * Exit codes: 0 success; 2 a usage error, a command line that is wrong
 * whatever the disk holds (an unknown option, a malformed value, two
 * options in conflict, a file option spelt as a directory), and two file
 * options that name one file, through a link too; 1 any other failure,
 * a path the file system refuses among them (a directory where a file
 * must be, a missing model, no room on the disk). A command checks its
 * usage errors before it looks at its files.
 */
#ifndef QKV_CLI_H
#define QKV_CLI_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "apps/coref.h"
#include "qkv.h"

#define CLI_OK 0
#define CLI_FAIL 1
#define CLI_USAGE 2
#define CLI_HELP (-1) /* --help was printed: exit 0 */

/* x for a CSV field: a NaN without its sign, so that every NaN prints as
 * "nan" (x86's default NaN has its sign bit set, and printf writes the sign:
 * "-nan", which some CSV readers take for text). */
static inline double cli_num(double x)
{
    return isnan(x) ? fabs(x) : x;
}

/* OPT_DIR and OPT_FILE are paths that must not be empty, nor "-" (which
 * names no standard stream here; "./-" names the file); an OPT_FILE must
 * not be spelt as a directory ("d/", ".", "d/.."). Each is a usage error
 * (CLI_USAGE). The file system is not looked at: a directory where a
 * file must be, or a file where a directory must be, is refused by the
 * command when it comes to the path, after its usage errors, with exit
 * CLI_FAIL, as for its default paths. An OPT_DIR's value is its argument
 * without the trailing "/" and "/." ("d/" is "d", "/." is "/"), cut short
 * in argv itself.
 * OPT_U64 takes 0 to 2^64 - 1 whatever min and max say. */
typedef enum cli_kind {
    OPT_FLAG,
    OPT_INT,
    OPT_U64,
    OPT_DOUBLE,
    OPT_STR,
    OPT_DIR,
    OPT_FILE
} cli_kind;

/* One --long option. dst points at an int (OPT_FLAG, OPT_INT), uint64_t,
 * double or const char *. min/max bound numbers (inclusive). Numbers are
 * parsed strictly (cli_parse_ll and friends). */
typedef struct cli_opt {
    const char *name; /* without the leading "--" */
    cli_kind kind;
    void *dst;
    double min, max;
    const char *help; /* one line; "ARG: text" names the argument */
} cli_opt;

/* The options that several commands take, each with one limit wherever
 * it is used: a command lists CLI_OPT_STEPS(&o.steps, "N: ...") and so on
 * rather than its own numbers. Steps and step intervals (--steps,
 * --train-steps, --log-every, --eval-every) share one bound; a batch of
 * CLI_MAX_BATCH sentences of a long sequence needs gigabytes, and running
 * out of memory fails with a message (the tape's), as it does for any
 * batch. */
#define CLI_MAX_STEPS 1e7
#define CLI_MAX_BATCH 4096
#define CLI_MIN_LR 1e-12
#define CLI_MAX_LR 1e300 /* a rate that diverges is reported as such */
#define CLI_MAX_CLIP 1e12
#define CLI_MAX_INIT_STD QKV_COREF_MAX_INIT_STD /* a checkpoint's too (coref/model.h) */
#define CLI_MAX_SEEDS 32                        /* --seeds: the runs repeated per setting */
#define CLI_MAX_THREADS 64 /* qkv_threads_use's limit (runtime.h); QKV_THREADS too */
#define CLI_MAX_JOBS 64

/* clang-format off */
#define CLI_OPT_STEPS(dst, help) {"steps", OPT_INT, (dst), 1, CLI_MAX_STEPS, (help)}
#define CLI_OPT_EVERY(name, dst, help) {(name), OPT_INT, (dst), 1, CLI_MAX_STEPS, (help)}
#define CLI_OPT_BATCH(dst, help) {"batch", OPT_INT, (dst), 1, CLI_MAX_BATCH, (help)}
#define CLI_OPT_LR(dst, help) {"lr", OPT_DOUBLE, (dst), CLI_MIN_LR, CLI_MAX_LR, (help)}
#define CLI_OPT_CLIP(dst, help) {"clip", OPT_DOUBLE, (dst), 0, CLI_MAX_CLIP, (help)}
#define CLI_OPT_INIT_STD(dst, help) {"init-std", OPT_DOUBLE, (dst), 0, CLI_MAX_INIT_STD, (help)}
#define CLI_OPT_SEEDS(dst, help) {"seeds", OPT_INT, (dst), 1, CLI_MAX_SEEDS, (help)}
#define CLI_OPT_THREADS(dst, help) {"threads", OPT_INT, (dst), 1, CLI_MAX_THREADS, (help)}
#define CLI_OPT_JOBS(dst, help) {"jobs", OPT_INT, (dst), 1, CLI_MAX_JOBS, (help)}
/* clang-format on */

/* Parses argv[1..] (argv[0] is the subcommand name). Positional arguments
 * are stored in pos (at most max_pos, count in *npos; pass NULL/0 to allow
 * none): those that do not start with '-', "-" itself, negative numbers
 * such as "-1,2", and everything after "--"; any other "-x" is an unknown
 * option. An option's value is the next argument, or follows its "=";
 * a next argument that reads as an option ("--log --seeds") is refused,
 * not taken as the value. Prints the usage and returns CLI_HELP for
 * -h/--help; prints a one-line error and returns CLI_USAGE on a bad
 * option; CLI_OK otherwise. */
int cli_parse(int argc, char **argv, const cli_opt *opts, int nopts, const char *usage,
              const char *about, char **pos, int max_pos, int *npos);

/* dir/name in buf (len bytes), the path of a file a command writes in
 * its directory (an OPT_DIR): "d/runs.csv", and "/runs.csv" in "/", not
 * "//runs.csv". Returns buf. */
const char *cli_path_in(char *buf, size_t len, const char *dir, const char *name);

/* What to tell a user whose command ran out of memory ("try a smaller
 * --batch"), added to every message of status QKV_ERR_NOMEM
 * (cli_fail_status), which then names no C function: the library's hint
 * that a loop may have forgotten qkv_tape_reset is for C programmers.
 * NULL: free some memory and try again. */
void cli_memory_advice(const char *advice);

/* Prints "qkv: <message>" to stderr and returns CLI_FAIL. For a failure
 * that no library status reports; one that does goes to cli_fail_status. */
int cli_fail(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* cli_fail for a failure of the given status: the library's (err.status,
 * qkv_tape_status), or QKV_ERR_NOMEM where the program's own allocation
 * failed. With QKV_ERR_NOMEM, and only then, the message is one about
 * memory, as cli_memory_advice says; the text itself does not decide
 * (a name the user gave may say "out of memory"). */
int cli_fail_status(qkv_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* The failure of a step that reports through err or, when err holds
 * none, through the tape t: "what: <message>" with the status of
 * whichever holds it (cli_fail_status). */
int cli_fail_step(const char *what, const qkv_error *err, const qkv_tape *t);

/* Prints "qkv: <message>" and a hint to run --help; returns CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Draws a progress bar on stderr when stderr is a terminal and quiet is
 * zero: step of total, with a short status text. done = 1 ends the line. */
void cli_progress(int quiet, long step, long total, const char *status, int done);

/* Erases a bar that cli_progress left on the terminal without ending it,
 * so that a table row (on stdout) or a message can take its line; nothing
 * if there is none. Call it before printing while a bar may be shown. */
void cli_progress_clear(void);

/* Strict number parsers: the whole string must be the number, with no
 * spaces, no '+', no hex, inf or nan; cli_parse_ll allows a leading '-',
 * cli_parse_u64 does not, and cli_parse_double takes [-]d[.d][e[+-]d] and
 * rejects a value that overflows. Each returns 0, or -1 (and leaves *out
 * alone). */
int cli_parse_ll(const char *s, long long *out);
int cli_parse_u64(const char *s, uint64_t *out);
int cli_parse_double(const char *s, double *out);

/* Parses a comma-separated list of distinct whole numbers in [lo, hi]
 * ("4,16,64") into out (at most max). Returns the count, or -1 for a
 * malformed list: an empty item, a leading or trailing comma, a sign where
 * lo >= 0 allows none, a number out of range, a repeat, or more than max
 * items. */
int cli_int_list(const char *s, int *out, int max, int lo, int hi);

/* Parses a list of distinct sequence models ("attention,rnn,lstm,gru")
 * into kinds (at most max, and at most CLI_MAX_MODELS). Returns the count,
 * or -1 for a malformed list, an unknown model or a repeat. */
#define CLI_MAX_MODELS 16
int cli_model_list(const char *s, qkv_seq_kind *kinds, int max);

/* Splits a comma-separated list into buf (len bytes) and items (at most
 * max), which point into buf. Returns the count, or -1 for an empty list,
 * an empty item (a leading, trailing or double comma), a list longer than
 * buf, or more than max items. The items themselves are not checked. */
int cli_split_list(const char *s, char *buf, size_t len, char **items, int max);

/* The mean of x[0..n) and its sample standard deviation (0 for n = 1). */
void cli_mean_sd(const double *x, int n, double *mean, double *sd);

/* x to `digits` significant digits, trailing zeros kept ("1.20", "19.2",
 * "0.0500", "256"); from 1e5 up and below 1e-3 in e-notation ("2.28e+05");
 * 0 as "0"; inf and NaN as printf has them, NaN unsigned. digits is 1 to
 * 9. Returns buf. */
const char *cli_format_sig(char *buf, size_t len, double x, int digits);

/* Display width of UTF-8 text in terminal columns: CJK ideographs and
 * full-width forms count 2, other characters 1. */
int cli_text_width(const char *s);

/* Prints s left-aligned (padded) or right-aligned (right) in a field of
 * `width` columns, by display width: printf's widths count bytes, and Σ,
 * ‖ or a Chinese character is one or two columns of two or three bytes. */
void cli_print_padded(FILE *out, const char *s, int width);
void cli_print_right(FILE *out, const char *s, int width);

/* Prints s, a path or text the user gave, to out as a message shows it
 * (qkv_escape): control characters and bytes of invalid UTF-8 as \xNN,
 * characters that print as nothing or steer the terminal as \u{XXXX},
 * other UTF-8 (Chinese) as it is; so that no name can drive the
 * terminal. For every user string in ordinary output ("wrote DIR/x.csv");
 * errors (cli_fail) escape theirs. */
void cli_put_safe(FILE *out, const char *s);

/* Subcommands. */
int cmd_demo(int argc, char **argv);
int cmd_gradcheck(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_resolve(int argc, char **argv);
int cmd_saturation(int argc, char **argv);
int cmd_softmax(int argc, char **argv);
int cmd_distance(int argc, char **argv);
int cmd_bptt(int argc, char **argv);
int cmd_parallel(int argc, char **argv);
int cmd_ablate(int argc, char **argv);
int cmd_inspect(int argc, char **argv);

/* ---- shared by several subcommands ---- */

/* Independent tasks 0..n-1 of an experiment (tasks.c). run writes task's
 * output (text or bytes) to out and returns CLI_OK or a failure (after
 * printing why); collect gets each task's bytes in task order and returns
 * CLI_OK or a failure. With jobs > 1 (and n <= CLI_TASKS_MAX) the tasks
 * run in that many forked worker processes, so run must depend only on
 * the task number and what ctx held before: the output is then the same
 * as with one job. cost, if not NULL, estimates a task's run time in any
 * unit: the workers then take the costliest tasks first, so that no long
 * task starts last while the other workers sit idle (the output does not
 * depend on it). name writes what a task is into buf (len bytes), with
 * the command's name, for the message about a worker that died in it or
 * could not write its results ("distance: the run of rnn at distance 8,
 * seed 2"). A progress bar counts the tasks (cli_progress). Returns
 * CLI_OK or the first failure. */
#define CLI_TASKS_MAX 1024
typedef int (*cli_task_fn)(void *ctx, int task, FILE *out);
typedef int (*cli_collect_fn)(void *ctx, int task, const char *bytes, size_t len);
typedef double (*cli_cost_fn)(void *ctx, int task);
typedef void (*cli_name_fn)(void *ctx, int task, char *buf, size_t len);
int cli_run_tasks(int n, int jobs, cli_task_fn run, cli_collect_fn collect, cli_cost_fn cost,
                  cli_name_fn name, void *ctx, int quiet, const char *what);

#define CLI_DEFAULT_MODEL "out/coref.safetensors"

/* Opens path for writing a CSV log (creating its directory) and writes the
 * header line. Returns NULL with the reason in err on failure. A regular
 * file (or none) at path, unless another user's or one with other names
 * (hard links), is written as a temporary file beside it
 * (DIR/.NAME.XXXXXX), which cli_csv_close or cli_csv_end, the only ways
 * to close it, rename over path once it is whole: until then, and after
 * a failed or interrupted run, path keeps the table it had. The regular
 * file standard output goes to (--csv /dev/stdout > f) is the exception:
 * the CSV is written through stdout itself, in order with what else the
 * command prints, never on the signals' list and never removed. */
FILE *cli_csv_create(const char *path, const char *header, qkv_error *err);

/* cli_csv_create for a file that must not exist yet: created exclusively
 * and written in place, so a file or symbolic link planted at path after
 * a check is refused, never written through. Closed with cli_fclose. */
FILE *cli_csv_create_new(const char *path, const char *header, qkv_error *err);

/* fprintf and fwrite (of n bytes) for a CSV that cli_csv_create or
 * cli_csv_create_new opened: the same results, and the first write that
 * fails keeps its reason (errno: "File too large" for a size limit) for
 * the close to report. Once the buffer that failed is gone, fclose finds
 * nothing to write and no reason to give; a CSV written with plain
 * fprintf reports "Input/output error" then. */
int cli_csv_printf(FILE *f, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
size_t cli_csv_write(FILE *f, const void *p, size_t n);

/* From now on SIGINT, SIGTERM and SIGHUP (unless ignored from the start)
 * remove every regular file cli_csv_create (its temporary file) or
 * cli_csv_create_new opened
 * and cli_fclose has not closed, and then every directory cli_mkdirs_for
 * made that is left empty, then end the program by that signal. */
void cli_remove_partial_on_signals(void);

/* qkv_mkdirs_for for an output of the program: the directories it makes
 * on the way to path are listed, for cli_remove_made_dirs and the
 * signals (cli_remove_partial_on_signals) to remove. cli_csv_create and
 * cli_csv_create_new make theirs with it. */
qkv_status cli_mkdirs_for(const char *path, qkv_error *err);

/* Removes each directory cli_mkdirs_for made that is empty now, newest
 * first (a child before its parent), and forgets them all: for a command
 * that failed, so that it leaves no empty directory of its own behind.
 * One that holds anything (a finished table, a failed run's log), and
 * one that was there before, stays. */
void cli_remove_made_dirs(void);

/* Forgets every file and directory this process made so far, for a
 * forked worker: the handler it inherits (cli_remove_partial_on_signals)
 * then removes none of its parent's, which the parent itself removes if
 * it must. */
void cli_forget_outputs(void);

/* Fails now, with the reason in err, where cli_csv_create(path) would
 * fail later, after a command's work: a directory that cannot be made,
 * a name too long, a directory at path, a file there that cannot be
 * opened for writing, or no file there and a directory that takes no new
 * one. Makes nothing, neither a file nor a directory (cli_csv_create
 * makes the directories); a device, pipe or link at path is left for the
 * write to judge. For each CSV a command writes after its runs. */
qkv_status cli_csv_check(const char *path, qkv_error *err);

/* 1 if paths a and b name the same file: the same string, the same file
 * (device and inode) when both exist, or otherwise the same path once the
 * directories on their way are made ("sub/../x" is "x" even before sub
 * exists; links in the part that exists followed); else 0. For refusing
 * to write two outputs, or an output over an input, to one file. */
int cli_same_file(const char *a, const char *b);

/* Closes a file that was written: -1 if any write to it failed (ferror)
 * or the last flush fails, else 0. */
int cli_fclose(FILE *f);

/* Closes a CSV that cli_csv_create opened at path, as cli_fclose does
 * (stdout, when the CSV went there, is flushed and stays open), and
 * renames its temporary file over path. If a write failed (a full
 * disk), the temporary file is removed and path keeps what it had; a CSV
 * written in place is removed, being cut short, when path names a regular
 * file (not a device or a symbolic link). 0 or -1. */
int cli_csv_close(FILE *f, const char *path);

/* cli_csv_close for a command that may have failed before it wrote every
 * row: with ok 0, the new table is dropped as if a write had failed, since
 * a plot or script would take what is there for the whole table. */
int cli_csv_end(FILE *f, const char *path, int ok);

/* Why the last cli_fclose, cli_csv_close or cli_csv_end failed, for its
 * message ("No space left on device"): the first failed write's reason
 * (cli_csv_printf), else the close's own. */
const char *cli_csv_error(void);

/* Loads a checkpoint (path NULL = the default) for the command cmd
 * ("eval"), with a one-line error that names it ("qkv: eval: ..."); the
 * default's absence gets a hint to run qkv train. NULL on failure. */
qkv_coref_model *cli_load_model(const char *cmd, const char *path);

/* The demo's settings: the tutorial's are {8, 6, 4, 1, 42, 1}. d_k must be
 * a multiple of heads, and heads at most QKV_DEMO_MAX_HEADS. */
#define QKV_DEMO_MAX_HEADS 64
typedef struct demo_config {
    int d_model, d_k, seq_len, heads;
    uint64_t seed;
    int scaled;
} demo_config;

/* The demo's whole output for the given settings, written to out. Returns
 * CLI_OK, or CLI_FAIL after printing why. */
int demo_print(FILE *out, const demo_config *c);

#endif
