/*
 * tasks.c - independent runs of an experiment on several cores.
 *
 * cli_run_tasks runs each task into a memory stream and hands the bytes to
 * the caller's collect function in task order. With more than one job the
 * tasks run in forked worker processes, which take the next task from a
 * queue (a pipe holding every task number, the costliest first: longest
 * processing time first, the classic greedy schedule) and append (task, length,
 * bytes) records to a temporary file of their own; the parent counts the
 * finished tasks for the progress bar, waits for the workers, and then
 * collects every task in order. The serial path goes through the same
 * bytes, so the output is the same whatever the number of jobs, as long
 * as a task depends only on its number (each run seeds its own RNGs).
 *
 * Processes rather than threads: a task may use the library's thread pool
 * and the per-thread kernel scratch, and forked workers share none of it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"

/* Runs one task into a fresh memory stream: CLI_OK with the bytes in
 * *buf (free them) and their count in *len, or the task's failure. */
static int run_to_memory(cli_task_fn run, void *ctx, int task, char **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    FILE *ms = open_memstream(buf, len);
    if (ms == NULL)
        return cli_fail("out of memory for task %d", task);
    int r = run(ctx, task, ms);
    if (fclose(ms) != 0 && r == CLI_OK)
        r = cli_fail("out of memory for task %d", task);
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

/* A worker: tasks from the queue until it is empty, each record into out,
 * one byte per finished task into done. Never returns. */
static void worker(int queue, int done, FILE *out, cli_task_fn run, void *ctx)
{
    int task;
    for (;;) {
        ssize_t got = read(queue, &task, sizeof task);
        if (got < 0 && errno == EINTR)
            continue;
        if (got != (ssize_t)sizeof task)
            break;
        char *buf;
        size_t len;
        if (run_to_memory(run, ctx, task, &buf, &len) != CLI_OK)
            _exit(CLI_FAIL);
        int bad = fwrite(&task, sizeof task, 1, out) != 1 ||
                  fwrite(&len, sizeof len, 1, out) != 1 ||
                  (len > 0 && fwrite(buf, 1, len, out) != len);
        free(buf);
        if (bad || write_all(done, "x", 1) != 0) {
            fprintf(stderr, "qkv: a worker could not write its results\n");
            _exit(CLI_FAIL);
        }
    }
    _exit(fflush(out) == 0 && !ferror(out) ? CLI_OK : CLI_FAIL);
}

/* Reads one worker's records into bufs/lens (by task). */
static int read_records(FILE *f, int n, char **bufs, size_t *lens)
{
    rewind(f);
    int task;
    size_t len;
    while (fread(&task, sizeof task, 1, f) == 1) {
        if (fread(&len, sizeof len, 1, f) != 1 || task < 0 || task >= n || bufs[task] != NULL)
            return -1;
        bufs[task] = malloc(len + 1);
        if (bufs[task] == NULL || (len > 0 && fread(bufs[task], 1, len, f) != len))
            return -1;
        lens[task] = len;
    }
    return ferror(f) ? -1 : 0;
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

static int run_parallel(int n, int jobs, cli_task_fn run, cli_collect_fn collect, cli_cost_fn cost,
                        void *ctx, int quiet, const char *what)
{
    int queue[2] = {-1, -1}, done[2] = {-1, -1};
    FILE **outs = calloc((size_t)jobs, sizeof *outs);
    pid_t *pids = calloc((size_t)jobs, sizeof *pids);
    char **bufs = calloc((size_t)n, sizeof *bufs);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    int r = CLI_OK, started = 0;
    if (outs == NULL || pids == NULL || bufs == NULL || lens == NULL)
        r = cli_fail("out of memory");
    if (r == CLI_OK && (pipe(queue) != 0 || pipe(done) != 0))
        r = cli_fail("cannot make a pipe for the workers: %s", strerror(errno));
    if (r == CLI_OK)
        r = queue_tasks(queue[1], n, cost, ctx);
    if (r == CLI_OK) {
        close(queue[1]);
        queue[1] = -1;
    }
    fflush(NULL); /* nothing buffered is written twice */
    for (int w = 0; r == CLI_OK && w < jobs; w++) {
        if ((outs[w] = tmpfile()) == NULL) {
            r = cli_fail("cannot make a temporary file: %s", strerror(errno));
            break;
        }
        pids[w] = fork();
        if (pids[w] < 0) {
            r = cli_fail("cannot start a worker: %s", strerror(errno));
            break;
        }
        if (pids[w] == 0) {
            close(done[0]);
            worker(queue[0], done[1], outs[w], run, ctx);
        }
        started++;
    }
    if (started > 0) {
        close(queue[0]);
        close(done[1]);
        queue[0] = done[1] = -1;
        char c;
        long finished = 0;
        ssize_t got;
        while ((got = read(done[0], &c, 1)) != 0) {
            if (got < 0 && errno == EINTR)
                continue;
            if (got < 0)
                break;
            if (++finished < n) /* the last count is drawn once, below */
                cli_progress(quiet, finished, n, what, 0);
        }
        cli_progress(quiet, finished, n, what, 1);
        close(done[0]);
        done[0] = -1;
        for (int w = 0; w < started; w++) {
            int status = 0;
            pid_t got_pid;
            while ((got_pid = waitpid(pids[w], &status, 0)) < 0 && errno == EINTR)
                ;
            if (got_pid == pids[w] && WIFSIGNALED(status)) /* it could not say why */
                r = cli_fail("a worker process was ended by signal %d (%s)", WTERMSIG(status),
                             strsignal(WTERMSIG(status)));
            else if (got_pid < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != CLI_OK)
                r = CLI_FAIL; /* the worker said why on stderr */
        }
    }
    for (int w = 0; r == CLI_OK && w < started; w++)
        if (read_records(outs[w], n, bufs, lens) != 0)
            r = cli_fail("cannot read a worker's results back");
    for (int t = 0; r == CLI_OK && t < n; t++)
        if (bufs[t] == NULL)
            r = cli_fail("task %d of %d was never run", t, n);
    for (int t = 0; r == CLI_OK && t < n; t++)
        r = collect(ctx, t, bufs[t], lens[t]);
    for (int i = 0; i < 2; i++) { /* what an early failure left open */
        if (queue[i] >= 0)
            close(queue[i]);
        if (done[i] >= 0)
            close(done[i]);
    }
    for (int w = 0; outs != NULL && w < jobs; w++)
        if (outs[w] != NULL)
            fclose(outs[w]);
    for (int t = 0; bufs != NULL && t < n; t++)
        free(bufs[t]);
    free(outs);
    free(pids);
    free(bufs);
    free(lens);
    return r;
}

int cli_run_tasks(int n, int jobs, cli_task_fn run, cli_collect_fn collect, cli_cost_fn cost,
                  void *ctx, int quiet, const char *what)
{
    if (jobs > n)
        jobs = n;
    if (jobs > 1 && n <= CLI_TASKS_MAX)
        return run_parallel(n, jobs, run, collect, cost, ctx, quiet, what);
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
