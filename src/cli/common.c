/*
 * common.c - option parsing, errors and the progress bar for every
 * subcommand.
 */
#define _XOPEN_SOURCE 700 /* realpath: POSIX, though XSI */
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "util/util.h"

/* What a user can do when the command runs out of memory (main.c sets
 * it for the command); NULL: the general advice. */
static const char *memory_advice;

void cli_memory_advice(const char *advice)
{
    memory_advice = advice;
}

/* A message about running out of memory, in s (len bytes), for a user of
 * the program: the library's hint for C programmers (did a loop forget
 * qkv_tape_reset?) goes, "the arena" becomes what is in use, and the
 * command's advice (the options to lower) is added. */
static void memory_message(char *s, size_t len)
{
    static const char hint[] = "; did a loop forget qkv_tape_reset?", arena[] = "(the arena has ";
    char *h = strstr(s, hint);
    if (h != NULL)
        memmove(h, h + strlen(hint), strlen(h + strlen(hint)) + 1);
    char *a = strstr(s, arena), *end;
    if (a != NULL) {
        const unsigned long long used = strtoull(a + strlen(arena), &end, 10);
        if (strncmp(end, " bytes in use)", 14) == 0) {
            char rest[1024];
            snprintf(rest, sizeof rest, "%s", end + 14);
            snprintf(a, len - (size_t)(a - s), "(%llu bytes in use)%s", used, rest);
        }
    }
    const size_t n = strlen(s);
    snprintf(s + n, len - n, "; %s",
             memory_advice != NULL ? memory_advice : "free some memory and try again");
}

/* Prints "qkv: " and the message, with control characters and invalid
 * UTF-8 (from user input) escaped, so nothing typed can drive the
 * terminal; for a failure of status QKV_ERR_NOMEM, as memory_message
 * words it. */
static void vmessage(qkv_status status, const char *fmt, va_list ap)
{
    char raw[9216], work[4 * sizeof raw], safe[1024];
    vsnprintf(raw, sizeof raw, fmt, ap);
    if (status == QKV_ERR_NOMEM)
        memory_message(raw, sizeof raw);
    qkv_escape_elided(safe, sizeof safe, raw, work, sizeof work);
    cli_progress_clear(); /* the message on a line of its own */
    fprintf(stderr, "qkv: %s\n", safe);
}

int cli_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage(QKV_OK, fmt, ap);
    va_end(ap);
    return CLI_FAIL;
}

int cli_fail_status(qkv_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage(status, fmt, ap);
    va_end(ap);
    return CLI_FAIL;
}

int cli_fail_step(const char *what, const qkv_error *err, const qkv_tape *t)
{
    if (err->status != QKV_OK)
        return cli_fail_status(err->status, "%s: %s", what, err->message);
    return cli_fail_status(qkv_tape_status(t), "%s: %s", what, qkv_tape_error(t));
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage(QKV_OK, fmt, ap);
    va_end(ap);
    fprintf(stderr, "Try 'qkv%s%s --help'.\n", *cmd ? " " : "", cmd);
    return CLI_USAGE;
}

/* One option of the help: "  left" padded to the description's column,
 * then the description in words, wrapped so that no line is wider than
 * 79 columns (a word wider than that stands alone on its line). */
static void help_line(const char *left, const char *text)
{
    enum { COL = 29, WIDTH = 79 };
    int at = printf("  %-26s", left); /* left is ASCII: bytes are columns */
    for (const char *w = text; *w != '\0';) {
        const size_t n = strcspn(w, " ");
        char word[256];
        snprintf(word, sizeof word, "%.*s", (int)n, w);
        const int ww = cli_text_width(word);
        if (at > COL && at + 1 + ww > WIDTH)
            at = printf("\n%*s", COL, "") - 1;
        else
            at += printf(" ");
        printf("%.*s", (int)n, w);
        at += ww;
        w += n;
        w += strspn(w, " ");
    }
    printf("\n");
}

static void print_help(const char *cmd, const cli_opt *opts, int nopts, const char *usage,
                       const char *about)
{
    printf("Usage: qkv %s%s%s\n\n%s\n\nOptions:\n", cmd, *usage != '\0' ? " " : "", usage, about);
    for (int i = 0; i < nopts; i++) {
        const char *h = opts[i].help, *colon = strstr(h, ": ");
        char left[64];
        if (opts[i].kind != OPT_FLAG && colon != NULL)
            snprintf(left, sizeof left, "--%s %.*s", opts[i].name, (int)(colon - h), h);
        else
            snprintf(left, sizeof left, "--%s", opts[i].name);
        help_line(left, opts[i].kind != OPT_FLAG && colon ? colon + 2 : h);
    }
    help_line("-h, --help", "show this help and exit");
}

/* The decimal digits at s: their count, 0 if none. */
static size_t digits(const char *s)
{
    size_t n = 0;
    while (s[n] >= '0' && s[n] <= '9')
        n++;
    return n;
}

int cli_parse_ll(const char *s, long long *out)
{
    const char *d = s + (*s == '-');
    size_t n = digits(d);
    if (n == 0 || d[n] != '\0')
        return -1; /* empty, a sign alone, '+', spaces or anything else */
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return -1;
    *out = v;
    return 0;
}

int cli_parse_u64(const char *s, uint64_t *out)
{
    /* "-0" is 0, as for the signed options (--distances -0); any other
     * sign is not a whole number here */
    if (*s == '-' && digits(s + 1) > 0 && strspn(s + 1, "0") == strlen(s + 1))
        s++;
    size_t n = digits(s);
    if (n == 0 || s[n] != '\0')
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v > UINT64_MAX)
        return -1;
    *out = (uint64_t)v;
    return 0;
}

int cli_parse_double(const char *s, double *out)
{
    /* [-]digits[.digits][(e|E)[-+]digits] or [-].digits...: what a person
     * types; no '+', spaces, hex, inf or nan */
    const char *p = s + (*s == '-');
    size_t whole = digits(p), frac = 0;
    p += whole;
    if (*p == '.') {
        frac = digits(p + 1);
        p += 1 + frac;
    }
    if (whole + frac == 0)
        return -1;
    if (*p == 'e' || *p == 'E') {
        p += 1 + (p[1] == '-' || p[1] == '+');
        size_t e = digits(p);
        if (e == 0)
            return -1;
        p += e;
    }
    if (*p != '\0')
        return -1;
    char *end;
    double v = strtod(s, &end);
    if (*end != '\0' || !isfinite(v))
        return -1;  /* overflow (inf); an underflow to 0 or a subnormal, which
                    * strtod also flags with ERANGE, is fine */
    *out = v + 0.0; /* -0 as 0: an option's value is a magnitude, and is
                     * echoed and saved ("init std -0"; a checkpoint whose
                     * "-0" its loader refused) */
    return 0;
}

/* The longest file or directory name an option takes: the commands build
 * DIR/name.csv from --out DIR in 4096-byte buffers, which must not cut it
 * short. */
#define MAX_PATH_OPT 4000

const char *cli_path_in(char *buf, size_t len, const char *dir, const char *name)
{
    const size_t n = strlen(dir);
    snprintf(buf, len, "%s%s%s", dir, n > 0 && dir[n - 1] == '/' ? "" : "/", name);
    return buf;
}

static int set_value(const char *cmd, const cli_opt *o, char *v)
{
    switch (o->kind) {
    case OPT_STR:
    case OPT_DIR:
    case OPT_FILE: {
        const int path = o->kind != OPT_STR;
        const size_t len = strlen(v);
        if (path && len == 0)
            return cli_usage_error(cmd, "--%s: the file or directory name is empty", o->name);
        if (path && len > MAX_PATH_OPT)
            return cli_usage_error(cmd, "--%s: the file or directory name is longer than %d bytes",
                                   o->name, MAX_PATH_OPT);
        /* "-" reads as standard output (or input) to a user, but a file
         * or directory of that name was made: no option takes a stream
         * for it, and the name is ./- (a --csv goes to standard output
         * as /dev/stdout, which the message then says) */
        if (path && strcmp(v, "-") == 0)
            return cli_usage_error(
                cmd,
                "--%s: '-' is not standard input or output here; write --%s %s./- for a %s named "
                "'-'",
                o->name, o->name,
                strcmp(o->name, "csv") == 0 ? "/dev/stdout for standard output, or --csv " : "",
                o->kind == OPT_FILE ? "file" : "directory");
        /* "d/", "." or "d/..": a directory by its spelling, whatever is
         * on disk, which the command would make first and then refuse to
         * write as a file. What is on disk is not looked at here: "d"
         * where d is a directory now, or "--out afile", is the file
         * system's refusal, exit 1, as for a command's default path, and
         * is found by the command itself, after its usage errors */
        const char *slash = strrchr(v, '/'), *base = slash != NULL ? slash + 1 : v;
        if (o->kind == OPT_FILE &&
            (*base == '\0' || strcmp(base, ".") == 0 || strcmp(base, "..") == 0))
            return cli_usage_error(cmd, "--%s: '%s' names a directory, not a file", o->name, v);
        if (o->kind == OPT_DIR) {
            /* kept without its trailing "/" and "/.", so that the files
             * written in it read "d/runs.csv", not "d//runs.csv" (a shell
             * completes a directory's name with the slash); cut short in
             * the argument itself, once it is taken, so that each
             * directory option keeps its own */
            size_t n = len;
            while (n > 1 && (v[n - 1] == '/' || (v[n - 1] == '.' && v[n - 2] == '/')))
                n--;
            v[n] = '\0';
        }
        *(const char **)o->dst = v;
        return CLI_OK;
    }
    case OPT_DOUBLE: {
        double d;
        if (cli_parse_double(v, &d) != 0 || d < o->min || d > o->max)
            return cli_usage_error(cmd, "--%s: '%s' is not a number in [%g, %g]", o->name, v,
                                   o->min, o->max);
        *(double *)o->dst = d;
        return CLI_OK;
    }
    case OPT_INT: {
        long long n;
        if (cli_parse_ll(v, &n) != 0 || (double)n < o->min || (double)n > o->max)
            return cli_usage_error(cmd, "--%s: '%s' is not a whole number in [%.0f, %.0f]", o->name,
                                   v, o->min, o->max);
        *(int *)o->dst = (int)n;
        return CLI_OK;
    }
    case OPT_U64:
        if (cli_parse_u64(v, (uint64_t *)o->dst) != 0)
            return cli_usage_error(cmd, "--%s: '%s' is not a whole number in [0, %llu]", o->name, v,
                                   (unsigned long long)UINT64_MAX);
        return CLI_OK;
    case OPT_FLAG: break;
    }
    return CLI_USAGE;
}

/* Checks the environment variables the library reads (runtime.h), which
 * it would otherwise ignore when malformed: QKV_KERNELS must name a kernel
 * set this build and CPU have, QKV_THREADS a thread count, as --threads
 * takes it. Unset or empty means the default. Returns CLI_OK, or
 * CLI_USAGE after one line naming the variable, its value and what it
 * takes. */
static int check_environment(void)
{
    const char *k = getenv("QKV_KERNELS"), *t = getenv("QKV_THREADS");
    qkv_error err = qkv_error_none();
    if (k != NULL && *k != '\0' && qkv_kernels_use(k, &err) != QKV_OK) {
        const char *why = strncmp(err.message, "kernels: ", 9) == 0 ? err.message + 9 : err.message;
        cli_fail("QKV_KERNELS: %s", why);
        return CLI_USAGE;
    }
    long long n;
    if (t != NULL && *t != '\0' &&
        (cli_parse_ll(t, &n) != 0 || n < 1 || n > CLI_MAX_THREADS ||
         qkv_threads_use((int)n, NULL) != QKV_OK)) {
        cli_fail("QKV_THREADS: '%s' is not a whole number of threads in [1, %d]", t,
                 CLI_MAX_THREADS);
        return CLI_USAGE;
    }
    return CLI_OK;
}

/* 1 if cli_parse reads argument a as an option: it starts with '-' and
 * is neither "-" alone nor a negative number ("-1,2", "-.5"). */
static int reads_as_option(const char *a)
{
    return a[0] == '-' && a[1] != '\0' && !(a[1] >= '0' && a[1] <= '9') &&
           !(a[1] == '.' && a[2] >= '0' && a[2] <= '9');
}

/* 1 if the arguments ask for the help as cli_parse reads them: -h or
 * --help as an option (--log --help too: an option is never a value),
 * not after "--" nor as --log=--help. */
static int wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
            return 1;
    return 0;
}

int cli_parse(int argc, char **argv, const cli_opt *opts, int nopts, const char *usage,
              const char *about, char **pos, int max_pos, int *npos)
{
    /* the environment first, but the help is shown whatever it holds */
    if (!wants_help(argc, argv)) {
        int r = check_environment();
        if (r != CLI_OK)
            return r;
    }
    const char *cmd = argv[0];
    int np = 0, options = 1; /* 0 after "--": the rest is positional */
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (options && strcmp(a, "--") == 0) {
            options = 0;
            continue;
        }
        if (options && (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)) {
            print_help(cmd, opts, nopts, usage, about);
            return CLI_HELP;
        }
        /* a positional argument: after "--", without a leading '-', "-"
         * alone, or a negative number ("-1,2,-0.5" for softmax) */
        if (!options || !reads_as_option(a)) {
            if (np >= max_pos)
                return cli_usage_error(cmd, "unexpected argument '%s'", a);
            pos[np++] = argv[i];
            continue;
        }
        if (a[1] != '-') /* -x: every option but -h is long */
            return cli_usage_error(cmd, "unknown option '%s'", a);
        char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const cli_opt *o = NULL;
        for (int j = 0; j < nopts && o == NULL; j++)
            if (strlen(opts[j].name) == len && strncmp(opts[j].name, name, len) == 0)
                o = &opts[j];
        if (o == NULL && len == 4 && strncmp(name, "help", 4) == 0) /* --help=x */
            return cli_usage_error(cmd, "--help takes no value");
        if (len == 0) /* "--=5": unknown option '--' named neither */
            return cli_usage_error(cmd, "'%s' is not an option: no name between '--' and '='", a);
        if (o == NULL)
            return cli_usage_error(cmd, "unknown option '--%.*s'", (int)len, name);
        if (o->kind == OPT_FLAG) {
            if (eq)
                return cli_usage_error(cmd, "--%s takes no value", o->name);
            *(int *)o->dst = 1;
            continue;
        }
        /* the next argument is the value unless it reads as an option:
         * "--log --seeds 3" forgot the log's name, and would write a file
         * called --seeds; a path of that name is given as --log=--seeds */
        if (!eq && i + 1 < argc && reads_as_option(argv[i + 1])) {
            if (strcmp(argv[i + 1], "-h") == 0 || strcmp(argv[i + 1], "--help") == 0) {
                print_help(cmd, opts, nopts, usage, about); /* what was asked for */
                return CLI_HELP;
            }
            char hint[1024] = ""; /* the message is cut short to fit a line anyway */
            if (o->kind == OPT_DIR || o->kind == OPT_FILE)
                snprintf(hint, sizeof hint, " (write --%s=%s if that is its name)", o->name,
                         argv[i + 1]);
            return cli_usage_error(cmd, "--%s needs a value, not the option '%s'%s", o->name,
                                   argv[i + 1], hint);
        }
        char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (v == NULL)
            return cli_usage_error(cmd, "--%s needs a value", o->name);
        int r = set_value(cmd, o, v);
        if (r != CLI_OK)
            return r;
    }
    if (npos != NULL)
        *npos = np;
    return CLI_OK;
}

/* Decodes one UTF-8 sequence at s (assumed valid); returns its length. */
static int utf8_next(const unsigned char *s, unsigned *cp)
{
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    int n = s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : 2;
    unsigned v = s[0] & (0x7Fu >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            *cp = 0xFFFD;
            return i;
        }
        v = (v << 6) | (s[i] & 0x3Fu);
    }
    *cp = v;
    return n;
}

static int wide(unsigned cp)
{
    return (cp >= 0x1100 && cp <= 0x115F) || (cp >= 0x2E80 && cp <= 0xA4CF) ||
           (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0xF900 && cp <= 0xFAFF) ||
           (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF60) ||
           (cp >= 0xFFE0 && cp <= 0xFFE6) || (cp >= 0x20000 && cp <= 0x3FFFD);
}

/* 1 while a bar is on stderr's last line, not yet ended or cleared */
static int bar_shown;

/* The terminal's width in columns on stderr, or 0 if it does not say. */
static int terminal_columns(void)
{
    struct winsize ws;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    return 0;
}

/* Cuts UTF-8 text s to at most cols display columns, at a character. */
static void cut_to_columns(char *s, int cols)
{
    int w = 0;
    unsigned char *p = (unsigned char *)s;
    while (*p) {
        unsigned cp;
        int n = utf8_next(p, &cp), cw = wide(cp) ? 2 : 1;
        if (w + cw > cols)
            break;
        w += cw;
        p += n;
    }
    *p = '\0';
}

void cli_progress(int quiet, long step, long total, const char *status, int done)
{
    static int tty = -1;
    if (tty < 0)
        tty = isatty(STDERR_FILENO);
    if (quiet || !tty || total <= 0)
        return;
    /* a line as wide as the terminal wraps, and '\r' then redraws only its
     * last row: the bar shrinks (or goes), then the text is cut, to the
     * width less one column */
    char tail[256], line[512];
    snprintf(tail, sizeof tail, " %ld/%ld %s", step, total, status);
    const int cols = terminal_columns(), room = cols - 1 - 2 - cli_text_width(tail);
    int width = 30;
    if (cols > 0 && room < width)
        width = room < 0 ? 0 : room;
    int fill = (int)((double)step / (double)total * width);
    fill = fill > width ? width : fill;
    if (width >= 3)
        snprintf(line, sizeof line, "[%.*s%*s]%s", fill,
                 "==============================", width - fill, "", tail);
    else /* no room for a bar: the count alone */
        snprintf(line, sizeof line, "%s", tail + 1);
    if (cols > 0)
        cut_to_columns(line, cols - 1);
    fprintf(stderr, "\r%s\033[K", line);
    if (done)
        fputc('\n', stderr);
    bar_shown = !done;
    fflush(stderr);
}

void cli_progress_clear(void)
{
    if (!bar_shown)
        return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
    bar_shown = 0;
}

int cli_int_list(const char *s, int *out, int max, int lo, int hi)
{
    int n = 0;
    char item[32];
    for (const char *p = s;; p++) {
        size_t len = strcspn(p, ",");
        long long v;
        if (len == 0 || len >= sizeof item || n >= max)
            return -1; /* an empty item (",,", a leading or trailing comma) */
        memcpy(item, p, len);
        item[len] = '\0';
        if (cli_parse_ll(item, &v) != 0 || v < lo || v > hi)
            return -1;
        for (int i = 0; i < n; i++)
            if (out[i] == v)
                return -1; /* a repeat would run and print the same cells twice */
        out[n++] = (int)v;
        p += len;
        if (*p == '\0')
            return n;
    }
}

int cli_model_list(const char *s, qkv_seq_kind *kinds, int max)
{
    char buf[256], *item[CLI_MAX_MODELS];
    const int n =
        cli_split_list(s, buf, sizeof buf, item, max < CLI_MAX_MODELS ? max : CLI_MAX_MODELS);
    for (int k = 0; k < n; k++) {
        if (qkv_seq_parse(item[k], &kinds[k]) != 0)
            return -1;
        for (int i = 0; i < k; i++)
            if (kinds[i] == kinds[k])
                return -1;
    }
    return n;
}

int cli_split_list(const char *s, char *buf, size_t len, char **items, int max)
{
    if (strlen(s) >= len)
        return -1;
    strcpy(buf, s);
    int n = 0;
    for (char *p = buf;; p++) {
        size_t k = strcspn(p, ",");
        if (k == 0 || n >= max)
            return -1;
        items[n++] = p;
        p += k;
        if (*p == '\0')
            return n;
        *p = '\0';
    }
}

int cli_text_width(const char *s)
{
    int w = 0;
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned cp;
        p += utf8_next(p, &cp);
        w += wide(cp) ? 2 : 1;
    }
    return w;
}

void cli_print_padded(FILE *out, const char *s, int width)
{
    int pad = width - cli_text_width(s);
    fputs(s, out);
    for (; pad > 0; pad--)
        fputc(' ', out);
}

void cli_print_right(FILE *out, const char *s, int width)
{
    for (int pad = width - cli_text_width(s); pad > 0; pad--)
        fputc(' ', out);
    fputs(s, out);
}

void cli_put_safe(FILE *out, const char *s)
{
    /* qkv_escape writes at most 4 bytes for each byte of s (\xNN for one,
     * \u{a0} for two, \u{10ffff} for four) */
    const size_t n = strlen(s);
    char *buf = n < SIZE_MAX / 4 ? malloc(4 * n + 1) : NULL;
    if (buf != NULL) {
        qkv_escape(buf, 4 * n + 1, s);
        fputs(buf, out);
        free(buf);
        return;
    }
    /* no memory for the copy: every byte outside printable ASCII as \xNN */
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p >= 0x20 && *p < 0x7f)
            fputc(*p, out);
        else
            fprintf(out, "\\x%02x", *p);
}

/* path as the file it will be once the directories on its way exist, in
 * out (len bytes): the part that exists resolved by realpath (symbolic
 * links and ".." followed), the rest appended a component at a time, a
 * ".." there dropping the component before it (a directory still to be
 * made, or one already resolved). Returns 0, or -1 if it does not fit or
 * the working directory cannot be resolved. */
static int resolved_path(const char *path, char *out, size_t len)
{
    char *base = realpath(path[0] == '/' ? "/" : ".", NULL);
    if (base == NULL)
        return -1;
    int n = snprintf(out, len, "%s", strcmp(base, "/") == 0 ? "" : base);
    free(base);
    int exists = 1;
    for (const char *p = path; n >= 0 && (size_t)n < len && *p != '\0';) {
        size_t k = strcspn(p, "/");
        if ((k == 1 && p[0] == '.') || k == 0) {
            /* "." or an empty component: no step */
        } else if (k == 2 && p[0] == '.' && p[1] == '.' && !exists) {
            char *slash = strrchr(out, '/');
            n = (int)(slash != NULL ? slash - out : 0);
            out[n] = '\0';
        } else {
            n += snprintf(out + n, len - (size_t)n, "/%.*s", (int)k, p);
            if (exists && (size_t)n < len) {
                char *real = realpath(out, NULL);
                if (real != NULL)
                    n = snprintf(out, len, "%s", strcmp(real, "/") == 0 ? "" : real);
                else
                    exists = 0;
                free(real);
            }
        }
        p += k + (p[k] == '/');
    }
    return n >= 0 && (size_t)n < len ? 0 : -1;
}

int cli_same_file(const char *a, const char *b)
{
    if (strcmp(a, b) == 0)
        return 1;
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    /* one or both not there yet: the same path once the directories are made */
    char ra[4096], rb[4096];
    return resolved_path(a, ra, sizeof ra) == 0 && resolved_path(b, rb, sizeof rb) == 0 &&
           strcmp(ra, rb) == 0;
}

/* The CSV files open for writing, which a signal that ends the program
 * (Ctrl-C) removes: cut short, they would pass for whole tables. Most are
 * temporary files beside their CSV, renamed over it when whole (temp). A
 * slot is filled before it is marked used and unmarked before it is
 * reused, so the handler reads only whole paths. */
#define PARTIAL_MAX 32
static char partial_path[PARTIAL_MAX][4200];
static FILE *partial_file[PARTIAL_MAX];
static int partial_temp[PARTIAL_MAX];
static volatile sig_atomic_t partial_used[PARTIAL_MAX];

/* Puts f, open on path, on the list: 1, or 0 if the list is full or path
 * (a file written in place) is not a regular file (--csv /dev/stdout). */
static int partial_add(FILE *f, const char *path, int temp)
{
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode) || strlen(path) >= 4200)
        return 0;
    /* written through a link (--csv /dev/stdout > out.txt): the link is
     * not the CSV, and stays, as cli_csv_end leaves it */
    if (!temp && (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode)))
        return 0;
    for (int i = 0; i < PARTIAL_MAX; i++)
        if (!partial_used[i]) {
            strcpy(partial_path[i], path);
            partial_file[i] = f;
            partial_temp[i] = temp;
            atomic_signal_fence(memory_order_seq_cst);
            partial_used[i] = 1;
            return 1;
        }
    return 0;
}

/* f's slot on the list, or -1. */
static int partial_find(const FILE *f)
{
    for (int i = 0; i < PARTIAL_MAX; i++)
        if (partial_used[i] && partial_file[i] == f)
            return i;
    return -1;
}

static void partial_drop(int i)
{
    if (i >= 0) {
        partial_used[i] = 0;
        atomic_signal_fence(memory_order_seq_cst);
    }
}

/* The directories this program made for its outputs (cli_mkdirs_for),
 * as chains: an entry is the deepest directory of a chain, and made_first
 * the length of its shallowest, the first one made; each directory
 * between them was made too (qkv_mkdirs makes a parent before its child,
 * and one told of a direct child of the last entry's deepest extends
 * that chain). So any depth takes one entry per output. Filled as the
 * list of files is: a slot before the count that shows it, and a chain
 * extended by writing the new part past the old end first and the '/'
 * that joins them last, so that the handler reads whole paths. A command
 * that fails, or a signal that ends it, removes those left empty, newest
 * first, and never one that was there before it ran. */
#define MADE_MAX 32
static char made_dir[MADE_MAX][4096];
static size_t made_first[MADE_MAX];
static volatile sig_atomic_t made_count;

static void note_made(void *ctx, const char *dir)
{
    (void)ctx;
    const int n = made_count;
    const size_t len = strlen(dir);
    if (len >= sizeof made_dir[0])
        return; /* not listed: it stays, as any directory did before */
    if (n > 0) {
        char *last = made_dir[n - 1];
        const size_t k = strlen(last);
        if (len > k + 1 && strncmp(dir, last, k) == 0 && dir[k] == '/' &&
            strchr(dir + k + 1, '/') == NULL) {         /* a direct child: the chain goes on */
            memcpy(last + k + 1, dir + k + 1, len - k); /* with its '\0' */
            atomic_signal_fence(memory_order_seq_cst);
            last[k] = '/';
            return;
        }
    }
    if (n >= MADE_MAX)
        return;
    memcpy(made_dir[n], dir, len + 1);
    made_first[n] = len;
    atomic_signal_fence(memory_order_seq_cst);
    made_count = n + 1;
}

qkv_status cli_mkdirs_for(const char *path, qkv_error *err)
{
    return qkv_mkdirs_for_noted(path, note_made, NULL, err);
}

/* rmdir removes a directory only when it is empty, and is safe in a
 * signal handler: each chain from its deepest directory up to its first,
 * cut short in place (the entries are forgotten after) */
static void remove_made_dirs(void)
{
    for (int i = made_count - 1; i >= 0; i--) {
        char *p = made_dir[i];
        for (size_t len = strlen(p); len >= made_first[i];) {
            if (rmdir(p) != 0 && errno != ENOENT)
                break; /* not empty: its parents hold it */
            char *slash = strrchr(p, '/');
            if (slash == NULL || (size_t)(slash - p) < made_first[i])
                break;
            *slash = '\0';
            len = (size_t)(slash - p);
        }
    }
}

void cli_forget_outputs(void)
{
    for (int i = 0; i < PARTIAL_MAX; i++)
        partial_used[i] = 0;
    made_count = 0;
    atomic_signal_fence(memory_order_seq_cst);
}

void cli_remove_made_dirs(void)
{
    remove_made_dirs();
    made_count = 0;
}

static void on_fatal_signal(int sig)
{
    for (int i = 0; i < PARTIAL_MAX; i++)
        if (partial_used[i])
            unlink(partial_path[i]);
    remove_made_dirs();   /* the files it made gone, those it made them in */
    signal(sig, SIG_DFL); /* and die of it, so that a script stops too */
    raise(sig);
}

void cli_remove_partial_on_signals(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old, sa;
        /* a signal ignored from the start (a background job's SIGINT) stays so */
        if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler == SIG_IGN)
            continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_fatal_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

/* QKV_OK if the existing regular file at path may be written (opened,
 * neither created nor truncated), else QKV_ERR_IO with the reason. */
static qkv_status check_open_for_write(const char *path, qkv_error *err)
{
    const int fd = open(path, O_WRONLY);
    if (fd < 0)
        return qkv_error_set(err, QKV_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    close(fd);
    return QKV_OK;
}

/* A CSV sent to the regular file standard output goes to (--csv
 * /dev/stdout > out.txt, or --csv out.txt > out.txt) is written through
 * stdout itself: the tables and the CSV's rows land there in the order
 * the program writes them, whole lines each; opened anew, the file would
 * be cut to nothing and each written from its start, over the other (and
 * a temporary file renamed over it would take the tables' place), and
 * two streams on it, each with its own buffer, would cut each other's
 * lines where a buffer filled. NULL if path is not that file. */
static FILE *open_stdout_file(const char *path)
{
    struct stat sp, so;
    if (stat(path, &sp) != 0 || !S_ISREG(sp.st_mode) || fstat(STDOUT_FILENO, &so) != 0 ||
        sp.st_dev != so.st_dev || sp.st_ino != so.st_ino)
        return NULL;
    return stdout;
}

/* The reason (an errno) of the first failed write to each CSV open, by
 * its stream (NULL: a free slot); one that finds the table full keeps
 * none, and its close gives its own reason. */
static struct {
    FILE *f;
    int err;
} write_error[PARTIAL_MAX];

/* Takes f's reason off the table: it, or 0 if none was kept. */
static int take_write_error(const FILE *f)
{
    for (int i = 0; i < PARTIAL_MAX; i++)
        if (write_error[i].f == f) {
            write_error[i].f = NULL;
            return write_error[i].err;
        }
    return 0;
}

/* Keeps e for f unless f has a reason already: the first one stands. */
static void note_write_error(FILE *f, int e)
{
    int free_slot = -1;
    for (int i = 0; i < PARTIAL_MAX; i++) {
        if (write_error[i].f == f)
            return;
        if (write_error[i].f == NULL && free_slot < 0)
            free_slot = i;
    }
    if (free_slot >= 0) {
        write_error[free_slot].f = f;
        write_error[free_slot].err = e != 0 ? e : EIO;
    }
}

int cli_csv_printf(FILE *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errno = 0;
    const int n = vfprintf(f, fmt, ap);
    va_end(ap);
    if (n < 0)
        note_write_error(f, errno);
    return n;
}

size_t cli_csv_write(FILE *f, const void *p, size_t n)
{
    errno = 0;
    const size_t done = n > 0 ? fwrite(p, 1, n, f) : 0;
    if (done < n)
        note_write_error(f, errno);
    return done;
}

/* cli_csv_create's body. A regular file, or none, at path is written as
 * a temporary file beside it, renamed over it by cli_csv_end when whole:
 * a run that fails or is interrupted leaves the last whole table there,
 * not a part of a new one. A file at path that may not be written is
 * refused, as opening it would be. Anything else (a device, a pipe, a
 * link, another user's file, a file with hard links), a directory that
 * takes no new file, or a full list is written in place. With excl,
 * path must not exist yet and is written in place (a symbolic link there
 * is not followed). Without it, the regular file standard output goes to
 * is written through stdout (open_stdout_file). */
static FILE *csv_open(const char *path, const char *header, int excl, qkv_error *err)
{
    /* a directory that cannot be made, or a name too long for it, fails
     * before any is made: nothing left behind */
    int missing;
    if (qkv_mkdirs_for_check(path, &missing, err) != QKV_OK || cli_mkdirs_for(path, err) != QKV_OK)
        return NULL;
    FILE *f = excl ? NULL : open_stdout_file(path);
    if (f != NULL) { /* not listed: standard output's file stays, whatever happens */
        take_write_error(f);
        cli_csv_printf(f, "%s\n", header);
        return f;
    }
    struct stat sb;
    const int exists = lstat(path, &sb) == 0;
    /* another user's file is written in place, as before: the new one
     * could not be given back to its owner, and a sticky directory (/tmp)
     * would refuse the rename only at the end of the run; so is a file
     * with other names (hard links), which a rename would leave behind */
    const int ours = exists && (sb.st_uid == geteuid() || geteuid() == 0) && sb.st_nlink == 1;
    if (!excl && (!exists || (S_ISREG(sb.st_mode) && ours))) {
        if (exists && check_open_for_write(path, err) != QKV_OK)
            return NULL;
        char tmp[4200];
        qkv_error ignored = qkv_error_none();
        /* no signal between the file's creation and its place on the list */
        sigset_t block, old;
        sigemptyset(&block);
        sigaddset(&block, SIGINT);
        sigaddset(&block, SIGTERM);
        sigaddset(&block, SIGHUP);
        pthread_sigmask(SIG_BLOCK, &block, &old);
        f = qkv_temp_beside(path, &tmp, &ignored);
        const int listed = f != NULL && partial_add(f, tmp, 1);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (f != NULL) {
            if (exists) { /* the new table keeps the old one's owner and mode */
                if (fchown(fileno(f), sb.st_uid, sb.st_gid) != 0) {
                    /* a group this user is not in: the file keeps its own */
                }
                fchmod(fileno(f), sb.st_mode & 07777);
            }
            if (listed) {
                take_write_error(f);
                cli_csv_printf(f, "%s\n", header);
                return f;
            }
            fclose(f);
            unlink(tmp);
            f = NULL;
        }
    }
    if (excl) {
        const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0666);
        if (fd >= 0 && (f = fdopen(fd, "w")) == NULL)
            close(fd);
    } else {
        f = fopen(path, "w");
    }
    if (f == NULL) {
        qkv_error_set(err, QKV_ERR_IO, "cannot write %s: %s", path, strerror(errno));
        return NULL;
    }
    partial_add(f, path, 0);
    take_write_error(f);
    cli_csv_printf(f, "%s\n", header);
    return f;
}

FILE *cli_csv_create(const char *path, const char *header, qkv_error *err)
{
    return csv_open(path, header, 0, err);
}

FILE *cli_csv_create_new(const char *path, const char *header, qkv_error *err)
{
    return csv_open(path, header, 1, err);
}

qkv_status cli_csv_check(const char *path, qkv_error *err)
{
    /* the directories are made when the CSV is: a command that fails
     * between the two leaves none behind */
    int missing;
    qkv_status s = qkv_mkdirs_for_check(path, &missing, err);
    if (s != QKV_OK || missing)
        return s; /* nothing there yet, and a new directory takes the file */
    struct stat sb;
    if (stat(path, &sb) != 0) {
        const int e = errno;
        if (e != ENOENT)
            return qkv_error_set(err, QKV_ERR_IO, "cannot write %s: %s", path, strerror(e));
        /* not there: the directory must take a new file (a link to
         * nowhere is left for fopen, which creates its target) */
        return lstat(path, &sb) == 0 ? QKV_OK : qkv_check_writable(path, err);
    }
    if (S_ISDIR(sb.st_mode))
        return qkv_error_set(err, QKV_ERR_IO, "cannot write %s: %s", path, strerror(EISDIR));
    if (!S_ISREG(sb.st_mode)) /* opening a pipe here would end its reader's input */
        return QKV_OK;
    return check_open_for_write(path, err);
}

qkv_coref_model *cli_load_model(const char *cmd, const char *path)
{
    qkv_error err = qkv_error_none();
    struct stat sb;
    if (path == NULL) {
        path = CLI_DEFAULT_MODEL;
        /* missing: qkv train makes it. Anything else in the way (a file
         * called out, a link to nowhere, a directory not to be searched)
         * is the loader's to name, since qkv train would fail on it too */
        if (lstat(path, &sb) != 0 && errno == ENOENT) {
            cli_fail("%s: no model at %s: run 'qkv train' first, or pass --model FILE", cmd, path);
            return NULL;
        }
    }
    qkv_coref_model *m = qkv_coref_load(path, qkv_coref_fingerprint(), &err);
    if (m == NULL)
        cli_fail_status(err.status, "%s: %s", cmd, err.message);
    else if (m->cfg.vocab != qkv_coref_vocab_size() || m->cfg.classes != qkv_coref_classes()) {
        cli_fail("%s: %s: model shapes do not fit this task", cmd, path);
        qkv_coref_model_free(m);
        m = NULL;
    }
    return m;
}

/* Why the last cli_csv_end that was to keep its table failed (an errno),
 * or 0. */
static int csv_errno;

const char *cli_csv_error(void)
{
    return csv_errno != 0 ? strerror(csv_errno) : "a write failed";
}

/* fclose for a CSV: 0, or -1 with the reason in csv_errno: the first
 * failed write's (cli_csv_printf), else the close's (a full disk leaves
 * a buffer that fails again here). */
static int csv_fclose(FILE *f)
{
    const int bad = ferror(f), first = take_write_error(f);
    errno = 0;
    /* standard output, when the CSV went to its file, is flushed, not
     * closed: the tables that follow go there too */
    if ((f == stdout ? fflush(f) : fclose(f)) == 0 && !bad && first == 0)
        return 0;
    csv_errno = first != 0 ? first : errno != 0 ? errno : EIO;
    return -1;
}

int cli_fclose(FILE *f)
{
    partial_drop(partial_find(f));
    return csv_fclose(f);
}

int cli_csv_close(FILE *f, const char *path)
{
    return cli_csv_end(f, path, 1);
}

int cli_csv_end(FILE *f, const char *path, int ok)
{
    const int i = partial_find(f);
    csv_errno = 0;
    if (i >= 0 && partial_temp[i]) {
        int done = csv_fclose(f) == 0 && ok;
        if (done && rename(partial_path[i], path) != 0) {
            csv_errno = errno;
            done = 0;
        }
        if (!done) /* and path keeps the table it had */
            unlink(partial_path[i]);
        partial_drop(i); /* only now: a signal before this removes a name that is gone */
        return done ? 0 : -1;
    }
    partial_drop(i);
    const int shared = f == stdout;
    if (csv_fclose(f) == 0 && ok)
        return 0;
    /* cut short: no plot or script may take it for a whole log; but a
     * device (--csv /dev/full), a link or standard output's file is not
     * the CSV alone, and stays */
    struct stat sb;
    if (!shared && lstat(path, &sb) == 0 && S_ISREG(sb.st_mode))
        remove(path);
    return -1;
}

const char *cli_format_sig(char *buf, size_t len, double x, int digits)
{
    if (!isfinite(x) || x == 0) { /* "inf", "nan", "0" (an sd of 0: "1.000±0"; -0 too) */
        snprintf(buf, len, "%g", cli_num(x) + 0.0);
        return buf;
    }
    /* rounded first, in e-notation, so that a carry (9.996 to 1.00e+01)
     * is seen; its exponent decides the form and the decimals */
    char e_form[48];
    snprintf(e_form, sizeof e_form, "%.*e", digits - 1, x);
    const int e = x == 0 ? 0 : atoi(strchr(e_form, 'e') + 1);
    if (x != 0 && (e < -3 || e >= 5))
        snprintf(buf, len, "%s", e_form);
    else
        snprintf(buf, len, "%.*f", digits - 1 - e > 0 ? digits - 1 - e : 0, x);
    return buf;
}

void cli_mean_sd(const double *x, int n, double *mean, double *sd)
{
    double s = 0, ss = 0;
    for (int i = 0; i < n; i++)
        s += x[i];
    *mean = s / n;
    for (int i = 0; i < n; i++)
        ss += (x[i] - *mean) * (x[i] - *mean);
    *sd = n > 1 ? sqrt(ss / (n - 1)) : 0;
}
