/*
 * util.h - the bottom layer, private to the library: counted allocation,
 * overflow-checked sizes, the one function every error goes through, and
 * the thread pool. Uses nothing but libc.
 */
#ifndef QKV_UTIL_H
#define QKV_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include "qkv/base.h"

#if defined(__GNUC__)
#define QKV_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define QKV_PRINTF(f, a)
#endif

/* ---- allocation (alloc.c) ---- */

/* The C allocation functions, counted (qkv_alloc_count), so that tests can
 * prove a training step allocates nothing. Free with free(). */
void *qkv_malloc(size_t n);
void *qkv_calloc(size_t n, size_t size);
void *qkv_realloc(void *p, size_t n);
void *qkv_aligned_alloc(size_t align, size_t n);

/* The largest single request (bytes) since the last call with reset
 * nonzero: how tests prove that a hostile file cannot make a loader
 * allocate more than its own size calls for. */
size_t qkv_alloc_largest(int reset);

/* The test hook: the allocation that makes qkv_alloc_count() reach n
 * fails (returns NULL, errno ENOMEM); 0 turns it off. A whole program can
 * be run with the environment variable QKV_TEST_ALLOC_FAIL=N instead,
 * read at the first allocation unless this was called before; the program
 * then prints "qkv-test: K allocations" on stderr at exit (N = 0 only
 * counts). Tests walk N
 * over every allocation of a run to prove that each failure is reported,
 * not crashed on or leaked. A worker process of the qkv program's --jobs
 * turns it off, and with QKV_TEST_ALLOC_FAIL_TASK=T as well, N counts the
 * allocations of the program's task T instead (src/cli/tasks.c). */
void qkv_alloc_fail_at(size_t n);

/* Overflow-checked size arithmetic: return 0 and leave *r alone on
 * overflow, else 1. */
int qkv_mul_size(size_t a, size_t b, size_t *r);
int qkv_add_size(size_t a, size_t b, size_t *r);

/* ---- errors (error.c) ---- */

/* qkv_error_set (base.h) with a va_list. Every error of the library passes
 * through here: a good place for a breakpoint. */
qkv_status qkv_verror(qkv_error *e, qkv_status s, const char *fmt, va_list ap);

/* Checks a caller's ABI tag against the library's own; on a mismatch
 * records QKV_ERR_ABI in e with a message that says how to rebuild (or,
 * when e is NULL, prints it once on stderr) and returns 0. */
int qkv_abi_ok(unsigned abi, qkv_error *e);

/* Writes a shape of n dimensions as "[d0,d1,...]" into buf (len bytes,
 * always NUL-terminated, cut short if it does not fit), for a message.
 * (error.c) */
void qkv_dims_str(int n, const int *dims, char *buf, size_t len);

/* x for a message, in buf (len bytes, always NUL-terminated, cut short if
 * it does not fit): "NaN" (whatever its sign bit: x86's default NaN has
 * it set, and printf writes "-nan"), "infinity" or "-infinity" (printf's
 * "inf"), else as %g writes it. Returns buf. The one way a message says
 * a number that may not be finite. (error.c) */
const char *qkv_num_str(char *buf, size_t len, double x);

/* qkv_escape into dst (cap bytes), by way of work (work_cap bytes, four
 * times src's length holds any escaping): text that does not fit keeps
 * its start (a third of the room) and its end, "..." between them, cut
 * on characters' boundaries, so that a long path in the middle of a
 * message does not push the reason at its end out. Returns the length
 * written. (utf8.c) */
size_t qkv_escape_elided(char *dst, size_t cap, const char *src, char *work, size_t work_cap);

/* ---- files (fs.c) ---- */

/* Creates every missing directory on the way to dir (like mkdir -p).
 * QKV_ERR_IO with the reason in err on failure. */
qkv_status qkv_mkdirs(const char *dir, qkv_error *err);

/* Creates the directory that the file path would live in (everything up
 * to its last '/'), as qkv_mkdirs does; nothing for a bare file name. */
qkv_status qkv_mkdirs_for(const char *path, qkv_error *err);

/* Told of a directory that qkv_mkdirs_noted made (its path, valid for
 * the call only). */
typedef void (*qkv_made_fn)(void *ctx, const char *dir);

/* qkv_mkdirs and qkv_mkdirs_for, calling made (unless NULL) with each
 * directory they make, a parent before its child: only those this call's
 * mkdir made, never one that was there, nor one that another process made
 * first. For a program that removes, on failure, what it made. */
qkv_status qkv_mkdirs_noted(const char *dir, qkv_made_fn made, void *ctx, qkv_error *err);
qkv_status qkv_mkdirs_for_noted(const char *path, qkv_made_fn made, void *ctx, qkv_error *err);

/* Checks that qkv_mkdirs(dir) could make dir, making nothing: every
 * directory on the way that exists is a directory, and the first that
 * does not could be made (its parent takes new entries) with each name
 * below it short enough. *missing is 1 if one is missing, else 0.
 * QKV_ERR_IO with the reason, as qkv_mkdirs would give it, in err. */
qkv_status qkv_mkdirs_check(const char *dir, int *missing, qkv_error *err);

/* qkv_mkdirs_check for the directory the file path would live in; when
 * one is missing, path's own name must be short enough for it too. */
qkv_status qkv_mkdirs_for_check(const char *path, int *missing, qkv_error *err);

/* Reads the whole regular file at path, of at most max bytes, into memory
 * the caller frees; its size goes to *len. It is read to its end, whatever
 * its size says (a /proc file's is 0). NULL with the reason in err for
 * a missing or unreadable path, a directory or other non-regular file
 * (QKV_ERR_IO), an empty file or one over max (QKV_ERR_FORMAT), or no
 * memory. */
unsigned char *qkv_read_file(const char *path, size_t max, size_t *len, qkv_error *err);

/* QKV_OK if nothing is at path or a regular file is; QKV_ERR_IO, naming
 * what is there instead (a symbolic link, not followed; a directory; a
 * device or other special file), for an output that a rename would
 * replace. */
qkv_status qkv_check_replaceable(const char *path, qkv_error *err);

/* QKV_OK if qkv_save_atomic could create its temporary file beside path
 * (and qkv_check_replaceable passes), once the directories on the way are
 * made (qkv_mkdirs_for_check, if one is missing): a check before a long
 * run whose output is saved at its end. Creates nothing that stays. */
qkv_status qkv_check_writable(const char *path, qkv_error *err);

/* Writes a file's bytes to f; returns a status (with the reason in err). */
typedef qkv_status (*qkv_write_fn)(void *ctx, FILE *f, qkv_error *err);

/* Saves a file durably and atomically: write() fills a new temporary file
 * in path's directory, created with O_EXCL (as mkstemp, but with mode 0666
 * less the umask, as fopen's) so that no planted file or symbolic link is
 * ever followed; it is flushed and fsynced, renamed
 * over path, and the directory is fsynced. A path that exists and is not a
 * regular file (a device, a directory, a symbolic link) is refused. On any
 * failure the temporary file is removed and path is untouched; QKV_ERR_IO
 * (or write's own status) with the reason in err. */
qkv_status qkv_save_atomic(const char *path, qkv_write_fn write, void *ctx, qkv_error *err);

/* Opens a new temporary file beside path for writing, as qkv_save_atomic
 * does (DIR/.BASE.XXXXXX, O_EXCL, mode 0666 less the umask; a path that
 * exists and is not a regular file is refused), with its name in tmp: for
 * an output written over a long run and renamed over path only once it is
 * whole. NULL with the reason in err. */
FILE *qkv_temp_beside(const char *path, char (*tmp)[4200], qkv_error *err);

/* ---- threads (threads.c) ---- */

/* Runs indices [i0,i1) of a job as part `part`. */
typedef void (*qkv_range_fn)(void *ctx, int part, size_t i0, size_t i1);

/* Work (in multiply-adds or so) a part needs to be worth a thread. */
#define QKV_PARALLEL_MIN_WORK ((size_t)1 << 20)

/* Runs fn over [0,n) cut into up to max_parts contiguous ranges, one per
 * thread (qkv_threads), fewer when work is too small to share, and waits
 * for all of them. Parts are numbered from 0; part 0 runs on the caller. A
 * call made while another job runs (from another thread, or from inside a
 * job) runs as one part on its caller. */
void qkv_parallel_for(size_t n, size_t work, int max_parts, qkv_range_fn fn, void *ctx);

/* The number of parts qkv_parallel_for would cut such a job into (at most;
 * fewer if a thread cannot be started). */
int qkv_parallel_parts(size_t n, size_t work, int max_parts);

/* The thread count a value of QKV_THREADS asks for (runtime.h): a whole
 * number from 1 to 64 in digits alone, as the qkv program's options take
 * it, or else 1 (NULL, empty, a sign, spaces, anything after the digits,
 * out of range). */
int qkv_threads_from_env(const char *s);

#endif
