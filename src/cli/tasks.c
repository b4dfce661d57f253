/*
 * tasks.c - independent runs of an experiment on several cores.
 *
 * cli_run_tasks runs each task into a memory stream and hands the bytes to
 * the caller's collect function in task order. With more than one job the
 * tasks run in forked worker processes, which take the next task from a
 * queue (a pipe holding every task number, the costliest first: longest
 * processing time first, the classic greedy schedule) and append (task,
 * status, output, messages) records to a temporary file of their own; a
 * worker's stderr goes to a file too, and each record carries what its
 * task printed there. The parent counts the tasks that ran for the
 * progress bar (a worker sends a note on a pipe of its own for each task
 * it takes, saying whether it ran, failed or was skipped, and one saying
 * why if it cannot go on), waits for the workers, and then, in task
 * order, prints each task's messages and collects it, up to the first
 * task that failed, whose messages it prints last: what the serial path
 * prints. A worker that cannot write its results, or dies, fails the
 * command with one message that says why. A worker
 * whose task failed skips the later tasks it takes, which that failure
 * makes moot. So the output, errors included, is the same whatever the
 * number of jobs, as long as a task depends only on its number (each run
 * seeds its own RNGs).
 *
 * Processes rather than threads: a task may use the library's thread pool
 * and the per-thread kernel scratch, and forked workers share none of it.
 *
 * A worker ends with its parent: killed alone (kill PID), the parent took
 * the partial tables with it, and its workers would otherwise run their
 * tasks, minutes, to the end, on every core, for nobody. On Linux the
 * kernel kills them at once (PR_SET_PDEATHSIG); elsewhere a worker sees
 * it between tasks.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <signal.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "cli/cli.h"
#include "util/util.h"

/* ---- test hooks (tests/test_faults.c) ---- */

/* The task named by the environment variable name, a whole number from 0
 * ("3"), or -1 when it is unset or names none. */
static int test_task(const char *name, const char **rest)
{
    const char *e = getenv(name);
    char *end;
    if (e == NULL || *e < '0' || *e > '9')
        return -1;
    const long t = strtol(e, &end, 10);
    if (t > CLI_TASKS_MAX)
        return -1;
    if (rest != NULL)
        *rest = end;
    return (int)t;
}

/* QKV_TEST_ALLOC_FAIL=N with QKV_TEST_ALLOC_FAIL_TASK=T: the N-th
 * allocation of task T fails, counted from the task's start in whichever
 * process runs it (the program, or a worker of --jobs), and no other
 * allocation of the program (alloc.c leaves QKV_TEST_ALLOC_FAIL to this
 * hook then); at the task's end, "qkv-test: task T: K allocations" goes to
 * its messages (stderr). Returns the count at the task's start. */
static size_t alloc_task_begin(int task)
{
    const char *n = getenv("QKV_TEST_ALLOC_FAIL");
    if (n == NULL || test_task("QKV_TEST_ALLOC_FAIL_TASK", NULL) != task)
        return 0;
    const size_t start = qkv_alloc_count(), at = (size_t)strtoull(n, NULL, 10);
    qkv_alloc_fail_at(at > 0 ? start + at : 0);
    return start;
}

static void alloc_task_end(int task, size_t start)
{
    if (getenv("QKV_TEST_ALLOC_FAIL") == NULL ||
        test_task("QKV_TEST_ALLOC_FAIL_TASK", NULL) != task)
        return;
    qkv_alloc_fail_at(0);
    fprintf(stderr, "qkv-test: task %d: %zu allocations\n", task, qkv_alloc_count() - start);
}

/* QKV_TEST_WORKER_FAULT=T:kill, T:exit or T:cut: the worker of --jobs
 * that takes task T raises SIGKILL (kill) or ends with status 1 saying
 * nothing (exit) as it takes it, or ends with status 0 once it has
 * written T's record, the record's last byte cut off (cut): a worker's
 * death, one that cannot say why, and results cut short. The serial path
 * ignores it. */
static void worker_fault(int task, const char *when, FILE *out)
{
    const char *kind = "";
    if (test_task("QKV_TEST_WORKER_FAULT", &kind) != task || *kind++ != ':')
        return;
    if (strcmp(when, "take") == 0 && strcmp(kind, "kill") == 0)
        raise(SIGKILL);
    if (strcmp(when, "take") == 0 && strcmp(kind, "exit") == 0)
        _exit(CLI_FAIL);
    if (strcmp(when, "written") == 0 && strcmp(kind, "cut") == 0) {
        const off_t end = lseek(fileno(out), 0, SEEK_END);
        _exit(end > 0 && ftruncate(fileno(out), end - 1) == 0 ? CLI_OK : CLI_FAIL);
    }
}

/* ---- tasks ---- */

/* Runs one task into a fresh memory stream: CLI_OK with the bytes in
 * *buf (free them) and their count in *len, or the task's failure. */
static int run_to_memory(cli_task_fn run, void *ctx, int task, char **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    FILE *ms = open_memstream(buf, len);
    if (ms == NULL)
        return cli_fail_status(QKV_ERR_NOMEM, "out of memory for task %d", task);
    const size_t start = alloc_task_begin(task);
    int r = run(ctx, task, ms);
    alloc_task_end(task, start);
    if (fclose(ms) != 0 && r == CLI_OK)
        r = cli_fail_status(QKV_ERR_NOMEM, "out of memory for task %d", task);
    if (r != CLI_OK) {
        free(*buf);
        *buf = NULL;
    }
    return r;
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* What a task left: its status, its output and its messages (stderr). */
typedef struct task_result {
    int ran, status;
    char *out, *err;
    size_t out_len, err_len;
} task_result;

static int put_bytes(FILE *f, const char *p, size_t len)
{
    return fwrite(&len, sizeof len, 1, f) == 1 && (len == 0 || fwrite(p, 1, len, f) == len) ? 0
                                                                                            : -1;
}

/* All the bytes fd holds, into *p (free it, even on failure), or -1. */
static int file_bytes(int fd, char **p, size_t *len)
{
    *p = NULL;
    *len = 0;
    const off_t end = lseek(fd, 0, SEEK_END);
    if (end < 0 || (*p = malloc((size_t)end + 1)) == NULL)
        return -1;
    for (size_t got = 0; got < (size_t)end;) {
        ssize_t r = pread(fd, *p + got, (size_t)end - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0) /* cut short under us: no errno of its own */
                errno = EIO;
            return -1;
        }
        got += (size_t)r;
    }
    *len = (size_t)end;
    return 0;
}

/* Empties the file at fd, from which stderr then writes afresh. */
static int rewind_messages(int fd)
{
    fflush(stderr);
    return ftruncate(fd, 0) == 0 && lseek(fd, 0, SEEK_SET) == 0 ? 0 : -1;
}

/* What a worker tells its parent, on a pipe of its own: a note as it
 * starts a task, one for each task it takes once that task is done, and
 * one before it gives up.
 * Far shorter than PIPE_BUF, each note is written whole. */
typedef struct worker_note {
    int task;   /* the task it is about, or -1 */
    int err;    /* 'w' and 'c': the errno of what failed */
    char event; /* 't' took it and runs it, then 'x' ran, 'f' ran and
                 * failed, or 's' skipped it (after a failure); 'w' could
                 * not write its results, 'c' could not capture its
                 * messages */
} worker_note;

static int send_note(int fd, int task, char event, int err)
{
    worker_note note;
    memset(&note, 0, sizeof note); /* no stray bytes in the padding */
    note.task = task;
    note.err = err;
    note.event = event;
    return write_all(fd, &note, sizeof note);
}

/* A worker that cannot go on: tells its parent why, for the one message
 * about it, and ends. */
static void give_up(int notes, int task, char event, int err)
{
    send_note(notes, task, event, err);
    _exit(CLI_FAIL);
}

/* A worker: tasks from the queue until it is empty, each record into out
 * (flushed at once, so that a write that fails is known with its task),
 * one note per task taken into notes. Its stderr goes to msgs, emptied
 * before each task, so that each record takes what its task printed, and
 * what a worker that dies printed last is there for the parent to show.
 * parent is the parent's pid, taken before the fork: once getppid() says
 * otherwise, the parent is gone and the worker ends (with nothing to
 * clean up: its files are tmpfile's, which have no name). Never
 * returns. */
static void worker(pid_t parent, int queue, int notes, FILE *out, FILE *msgs, cli_task_fn run,
                   void *ctx)
{
#ifdef __linux__
    /* SIGKILL, not SIGTERM: a SIGTERM ignored from the start stays
     * ignored (and the handler a worker inherits removes nothing of the
     * parent's: cli_forget_outputs) */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
        /* no such kernel feature: the check between tasks remains */
    }
#endif
    if (getppid() != parent) /* gone before the line above took effect */
        _exit(CLI_FAIL);
    /* QKV_TEST_ALLOC_FAIL counts the parent's allocations; a task's are
     * reached by QKV_TEST_ALLOC_FAIL_TASK (alloc_task_begin) */
    qkv_alloc_fail_at(0);
    int task, failed = INT_MAX; /* the first task that failed here */
    fflush(stderr);
    if (dup2(fileno(msgs), STDERR_FILENO) < 0)
        give_up(notes, -1, 'c', errno);
    for (;;) {
        ssize_t got = read(queue, &task, sizeof task);
        if (got < 0 && errno == EINTR)
            continue;
        if (got != (ssize_t)sizeof task)
            break;
        if (getppid() != parent) /* nobody will read what it would run */
            _exit(CLI_FAIL);
        char said = 's';     /* skipped; 'x' ran, 'f' ran and failed */
        if (task < failed) { /* past a failure, its output would never be shown */
            /* emptied first: a worker that dies from here on leaves what
             * this task printed, never the last one's */
            if (rewind_messages(STDERR_FILENO) != 0)
                give_up(notes, task, 'c', errno);
            if (send_note(notes, task, 't', 0) != 0)
                _exit(CLI_FAIL); /* the parent is gone */
            worker_fault(task, "take", out);
            char *buf = NULL, *msg = NULL;
            size_t len = 0, msg_len = 0;
            const int status[2] = {task, run_to_memory(run, ctx, task, &buf, &len)};
            said = status[1] == CLI_OK ? 'x' : 'f';
            if (status[1] != CLI_OK) {
                failed = task;
                len = 0; /* buf is gone */
            }
            fflush(stderr);
            const int bad = file_bytes(STDERR_FILENO, &msg, &msg_len) != 0 ||
                            fwrite(status, sizeof status, 1, out) != 1 ||
                            put_bytes(out, buf, len) != 0 || put_bytes(out, msg, msg_len) != 0 ||
                            fflush(out) != 0;
            const int why = errno != 0 ? errno : EIO;
            free(buf);
            free(msg);
            if (bad)
                give_up(notes, task, 'w', why);
            worker_fault(task, "written", out);
        }
        if (send_note(notes, task, said, 0) != 0)
            _exit(CLI_FAIL); /* the parent is gone */
    }
    _exit(CLI_OK);
}

/* What read_records finds wrong with a worker's records. */
enum { RECORDS_OK, RECORDS_CUT, RECORDS_GARBLED, RECORDS_UNREADABLE, RECORDS_NOMEM };

/* One byte string of a record into *p (free it, even on failure): no
 * longer than what is left of the file's size bytes. */
static int get_bytes(FILE *f, off_t size, char **p, size_t *len)
{
    *p = NULL;
    if (fread(len, sizeof *len, 1, f) != 1)
        return ferror(f) ? RECORDS_UNREADABLE : RECORDS_CUT;
    const off_t at = ftello(f);
    if (at < 0)
        return RECORDS_UNREADABLE;
    if (*len > (uintmax_t)(size - at))
        return RECORDS_CUT;
    if ((*p = malloc(*len + 1)) == NULL)
        return RECORDS_NOMEM;
    if (*len > 0 && fread(*p, 1, *len, f) != *len)
        return ferror(f) ? RECORDS_UNREADABLE : RECORDS_CUT;
    (*p)[*len] = '\0';
    return RECORDS_OK;
}

/* Reads one worker's records into res (by task): RECORDS_OK, or what is
 * wrong with them, with the task of the record at fault in *task (-1:
 * not known). */
static int read_records(FILE *f, int n, task_result *res, int *task)
{
    *task = -1;
    if (fseeko(f, 0, SEEK_END) != 0)
        return RECORDS_UNREADABLE;
    const off_t size = ftello(f);
    rewind(f);
    int head[2];
    for (off_t at = 0; at < size; at = ftello(f)) {
        if (at < 0)
            return RECORDS_UNREADABLE;
        if (fread(head, sizeof head, 1, f) != 1)
            return ferror(f) ? RECORDS_UNREADABLE : RECORDS_CUT;
        if (head[0] < 0 || head[0] >= n || res[head[0]].ran)
            return RECORDS_GARBLED;
        task_result *x = &res[head[0]];
        *task = head[0];
        x->ran = 1;
        x->status = head[1];
        int got = get_bytes(f, size, &x->out, &x->out_len);
        if (got == RECORDS_OK)
            got = get_bytes(f, size, &x->err, &x->err_len);
        if (got != RECORDS_OK)
            return got;
        *task = -1;
    }
    return RECORDS_OK;
}

typedef struct task_cost {
    double cost;
    int task;
} task_cost;

/* Costliest first; equal costs in task order. */
static int by_cost(const void *a, const void *b)
{
    const task_cost *x = a, *y = b;
    if (x->cost != y->cost)
        return x->cost < y->cost ? 1 : -1;
    return (x->task > y->task) - (x->task < y->task);
}

/* Writes every task number into the queue (CLI_TASKS_MAX of them fit in
 * the 4096 bytes that any pipe holds), the costliest first. */
static int queue_tasks(int fd, int n, cli_cost_fn cost, void *ctx)
{
    task_cost order[CLI_TASKS_MAX];
    for (int t = 0; t < n; t++)
        order[t] = (task_cost){cost != NULL ? cost(ctx, t) : 0, t};
    qsort(order, (size_t)n, sizeof order[0], by_cost);
    for (int t = 0; t < n; t++)
        if (write_all(fd, &order[t].task, sizeof order[t].task) != 0)
            return cli_fail("cannot queue the tasks: %s", strerror(errno));
    return CLI_OK;
}

/* The parent's view of one worker. */
typedef struct worker_view {
    pid_t pid;
    int notes;           /* the read end of its pipe of notes; -1 once it ended */
    FILE *out, *msgs;    /* its records and its stderr */
    int task;            /* the task it runs, or -1 */
    int stopped;         /* stop_workers ended it */
    worker_note trouble; /* why it gave up ('w' or 'c'), else event 0 */
} worker_view;

/* Prints "qkv: <what the task is>: <why>" (cli_fail), the task's name
 * from name, or the task's number without one, or nothing where the task
 * is not known (-1). Returns CLI_FAIL. */
static int fail_in(cli_name_fn name, void *ctx, int task, int n, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

static int fail_in(cli_name_fn name, void *ctx, int task, int n, const char *fmt, ...)
{
    char who[512] = "", why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (task >= 0 && name != NULL)
        name(ctx, task, who, sizeof who);
    else if (task >= 0)
        snprintf(who, sizeof who, "task %d of %d", task, n);
    return who[0] != '\0' ? cli_fail("%s: %s", who, why) : cli_fail("%s", why);
}

/* Waits for worker v to end; CLI_OK if it ended well, else (the first
 * time, *said 0) the one message that says why, naming the task it
 * took with it, *said then 1. Nothing is said of a worker that
 * stop_workers ended. */
static int reap(worker_view *v, int n, cli_name_fn name, void *ctx, int *said)
{
    int status = 0;
    pid_t got;
    while ((got = waitpid(v->pid, &status, 0)) < 0 && errno == EINTR)
        ;
    const int wait_err = errno; /* before the calls below change it */
    const int ok = got == v->pid && WIFEXITED(status) && WEXITSTATUS(status) == CLI_OK;
    if (ok || *said || v->stopped)
        return ok ? CLI_OK : CLI_FAIL;
    *said = 1;
    const worker_note *t = &v->trouble;
    if (t->event == 'w')
        return fail_in(name, ctx, t->task, n, "a worker could not write its results: %s",
                       strerror(t->err));
    if (t->event == 'c')
        return fail_in(name, ctx, t->task, n, "a worker could not capture its messages: %s",
                       strerror(t->err));
    /* what it printed in the task it died in: perhaps why (below the
     * progress bar, not glued to it) */
    char *last;
    size_t len;
    cli_progress_clear();
    if (file_bytes(fileno(v->msgs), &last, &len) == 0)
        fwrite(last, 1, len, stderr);
    free(last);
    if (got != v->pid)
        return fail_in(name, ctx, v->task, n, "cannot wait for a worker process: %s",
                       strerror(wait_err));
    if (WIFSIGNALED(status)) /* it could not say why */
        return fail_in(name, ctx, v->task, n, "a worker process was ended by signal %d (%s)",
                       WTERMSIG(status), strsignal(WTERMSIG(status)));
    return fail_in(name, ctx, v->task, n,
                   "a worker process ended with status %d without saying why",
                   WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

/* Ends the workers that still run (their pipe open), once the command
 * has failed in a way that no task of theirs can change: SIGKILL, not
 * SIGTERM, for the reason worker gives. */
static void stop_workers(worker_view *v, int started)
{
    for (int w = 0; w < started; w++)
        if (v[w].notes >= 0 && !v[w].stopped) {
            kill(v[w].pid, SIGKILL);
            v[w].stopped = 1;
        }
}

/* Reads the workers' notes, draws the progress bar, and waits for each
 * worker as its pipe ends (as it ends). A worker that ends badly fails
 * the command with one message (none if failed is nonzero: the command
 * failed and said so already), and the others are stopped: nothing they
 * could still do would be shown. Returns CLI_OK or the failure. */
static int follow_workers(worker_view *v, int started, int n, int quiet, const char *what,
                          cli_name_fn name, void *ctx, int failed)
{
    struct pollfd fds[CLI_MAX_JOBS];
    long finished = 0;
    int live = started, any_failed = 0, said = failed, r = failed ? CLI_FAIL : CLI_OK;
    for (int w = 0; w < started; w++)
        fds[w] = (struct pollfd){v[w].notes, POLLIN, 0};
    if (r != CLI_OK)
        stop_workers(v, started);
    while (live > 0) {
        if (poll(fds, (nfds_t)started, -1) < 0) {
            if (errno == EINTR)
                continue;
            if (!said)
                r = cli_fail("cannot follow the workers: %s", strerror(errno));
            said = 1;
            stop_workers(v, started);
            break;
        }
        for (int w = 0; w < started; w++) {
            if (fds[w].fd < 0 || fds[w].revents == 0)
                continue;
            worker_note note;
            const ssize_t got = read(fds[w].fd, &note, sizeof note);
            if (got < 0 && errno == EINTR)
                continue;
            if (got != (ssize_t)sizeof note) { /* it ended */
                close(fds[w].fd);
                fds[w].fd = v[w].notes = -1;
                live--;
                if (reap(&v[w], n, name, ctx, &said) != CLI_OK) {
                    r = CLI_FAIL;
                    stop_workers(v, started);
                }
                continue;
            }
            if (note.event == 'w' || note.event == 'c') {
                v[w].trouble = note;
                continue;
            }
            v[w].task = note.event == 't' ? note.task : -1;
            if (note.event == 't')
                continue;
            any_failed |= note.event == 'f';
            if (note.event == 's') /* skipped after a failure: it never ran */
                continue;
            if (++finished < n) /* the last count is drawn once, below */
                cli_progress(quiet, finished, n, what, 0);
        }
    }
    for (int w = 0; w < started; w++) /* after poll failed: the ones stopped */
        if (fds[w].fd >= 0) {
            close(fds[w].fd);
            fds[w].fd = v[w].notes = -1;
            reap(&v[w], n, name, ctx, &said);
        }
    /* after a failure the bar goes, as on the serial path (whose error
     * message clears it): the messages follow on their own */
    if (any_failed || r != CLI_OK)
        cli_progress_clear();
    else
        cli_progress(quiet, finished, n, what, 1);
    return r;
}

/* Reads the records of the workers into res; CLI_OK, or the one message
 * about those that do not read back. */
static int read_results(worker_view *v, int started, int n, task_result *res, cli_name_fn name,
                        void *ctx)
{
    for (int w = 0; w < started; w++) {
        int task;
        const int got = read_records(v[w].out, n, res, &task);
        const int why = errno;
        if (got == RECORDS_CUT)
            return fail_in(name, ctx, task, n, "the results a worker wrote were cut short");
        if (got == RECORDS_GARBLED)
            return fail_in(name, ctx, task, n, "the results a worker wrote are garbled");
        if (got == RECORDS_UNREADABLE)
            return fail_in(name, ctx, task, n, "cannot read back the results a worker wrote: %s",
                           strerror(why));
        if (got == RECORDS_NOMEM)
            return cli_fail_status(QKV_ERR_NOMEM, "out of memory");
    }
    return CLI_OK;
}

static int run_parallel(int n, int jobs, cli_task_fn run, cli_collect_fn collect, cli_cost_fn cost,
                        cli_name_fn name, void *ctx, int quiet, const char *what)
{
    int queue[2] = {-1, -1};
    worker_view *v = calloc((size_t)jobs, sizeof *v);
    task_result *res = calloc((size_t)n, sizeof *res);
    int r = CLI_OK, started = 0;
    if (v == NULL || res == NULL)
        r = cli_fail_status(QKV_ERR_NOMEM, "out of memory");
    if (r == CLI_OK && pipe(queue) != 0)
        r = cli_fail("cannot make a pipe for the workers: %s", strerror(errno));
    if (r == CLI_OK)
        r = queue_tasks(queue[1], n, cost, ctx);
    if (r == CLI_OK) {
        close(queue[1]);
        queue[1] = -1;
    }
    fflush(NULL); /* nothing buffered is written twice */
    const pid_t self = getpid();
    for (int w = 0; r == CLI_OK && w < jobs; w++) {
        int notes[2];
        if ((v[w].out = tmpfile()) == NULL || (v[w].msgs = tmpfile()) == NULL) {
            r = cli_fail("cannot make a temporary file: %s", strerror(errno));
            break;
        }
        if (pipe(notes) != 0) {
            r = cli_fail("cannot make a pipe for the workers: %s", strerror(errno));
            break;
        }
        v[w].pid = fork();
        if (v[w].pid == 0) {
            cli_forget_outputs(); /* the parent's to remove, not a worker's */
            close(notes[0]);
            for (int u = 0; u < w; u++) /* its siblings' pipes are the parent's to read */
                if (v[u].notes >= 0)
                    close(v[u].notes);
            worker(self, queue[0], notes[1], v[w].out, v[w].msgs, run, ctx);
        }
        close(notes[1]); /* so that the pipe ends with the worker */
        if (v[w].pid < 0) {
            close(notes[0]);
            r = cli_fail("cannot start a worker: %s", strerror(errno));
            break;
        }
        v[w].notes = notes[0];
        v[w].task = -1;
        started++;
    }
    if (started > 0) {
        close(queue[0]);
        queue[0] = -1;
        const int rf = follow_workers(v, started, n, quiet, what, name, ctx, r != CLI_OK);
        r = r != CLI_OK ? r : rf;
    }
    if (r == CLI_OK)
        r = read_results(v, started, n, res, name, ctx);
    /* as the serial path: each task's messages, then its output collected,
     * up to the first failure */
    for (int t = 0; r == CLI_OK && t < n; t++) {
        if (!res[t].ran) /* and no task before it failed */
            r = fail_in(name, ctx, t, n, "no worker ran it");
        else if (res[t].err_len > 0 &&
                 fwrite(res[t].err, 1, res[t].err_len, stderr) != res[t].err_len)
            r = CLI_FAIL; /* stderr itself failed: nothing to say it on */
        else if (res[t].status != CLI_OK)
            r = res[t].status;
        else
            r = collect(ctx, t, res[t].out, res[t].out_len);
    }
    for (int i = 0; i < 2; i++) /* what an early failure left open */
        if (queue[i] >= 0)
            close(queue[i]);
    for (int w = 0; v != NULL && w < jobs; w++) {
        if (v[w].notes >= 0 && w < started)
            close(v[w].notes);
        if (v[w].out != NULL)
            fclose(v[w].out);
        if (v[w].msgs != NULL)
            fclose(v[w].msgs);
    }
    for (int t = 0; res != NULL && t < n; t++) {
        free(res[t].out);
        free(res[t].err);
    }
    free(v);
    free(res);
    return r;
}

int cli_run_tasks(int n, int jobs, cli_task_fn run, cli_collect_fn collect, cli_cost_fn cost,
                  cli_name_fn name, void *ctx, int quiet, const char *what)
{
    if (jobs > n)
        jobs = n;
    if (jobs > CLI_MAX_JOBS)
        jobs = CLI_MAX_JOBS;
    if (jobs > 1 && n <= CLI_TASKS_MAX)
        return run_parallel(n, jobs, run, collect, cost, name, ctx, quiet, what);
    for (int t = 0; t < n; t++) {
        cli_progress(quiet, t, n, what, 0);
        char *buf;
        size_t len;
        int r = run_to_memory(run, ctx, t, &buf, &len);
        if (r == CLI_OK)
            r = collect(ctx, t, buf, len);
        free(buf);
        if (r != CLI_OK)
            return r;
    }
    cli_progress(quiet, n, n, what, 1);
    return CLI_OK;
}
