/*
 * threads.c - a small pool of worker threads for splitting batched work.
 *
 * qkv_parallel_for cuts [0,n) into one contiguous range per thread and
 * runs the ranges at once. Callers give every index work that does not
 * depend on the others (an attention item, a slice of rows), so the results
 * are the same bits whatever the thread count. With one thread (the
 * default) nothing is started and the range runs on the caller.
 *
 * Handing a job to a sleeping thread costs a futex wake-up, about 80 us on
 * the VM this was measured on, more than a small model's whole step. So a
 * worker spins for a while after each job, watching for the next, and only
 * then sleeps on the condition variable; the caller spins until its
 * workers are done. At exit the workers are told to stop and are joined.
 *
 * A worker runs each job in its caller's floating-point mode (on x86, the
 * MXCSR: rounding, and flushing subnormals to zero), so that a caller's
 * qkv_flush_denormals, or its own fesetround, gives the same bits on any
 * thread count.
 *
 * fork() copies only the thread that calls it. A child of a process whose
 * workers had started would wait for ever on workers it does not have, so
 * the child forgets them (pthread_atfork) and starts its own when it
 * first needs them, as PyTorch's intra-op pool does.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || (defined(__i386__) && defined(__SSE__))
#include <xmmintrin.h>
#define QKV_HAVE_MXCSR 1
#endif

#include "qkv/runtime.h"
#include "util/util.h"

#define MAX_THREADS 64
#define SPIN_NS 200000 /* a worker watches for its next job this long */

/* One worker's mailbox: the caller fills it in only while the worker is
 * idle, then moves round on (release); the worker reads only its own. */
typedef struct slot {
    atomic_ulong round;
    qkv_range_fn fn; /* NULL: stop */
    void *ctx;
    size_t i0, i1;
    unsigned csr; /* the caller's floating-point mode (MXCSR), or 0 */
} slot;

static struct {
    pthread_mutex_t lock; /* guards sleeping, starting, want and busy */
    pthread_cond_t go;
    int started; /* workers running: slots 1..started */
    pthread_t thread[MAX_THREADS];
    int want;           /* threads to use, caller included; 0: not chosen */
    int busy;           /* a job is running: other callers run serially */
    atomic_int pending; /* workers still running the current job */
    slot slot[MAX_THREADS];
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .go = PTHREAD_COND_INITIALIZER};

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* The calling thread's floating-point mode, and setting it: the MXCSR on
 * x86 (its exception flags masked out, as they are not a mode), nothing
 * elsewhere. */
static unsigned fp_mode(void)
{
#ifdef QKV_HAVE_MXCSR
    return _mm_getcsr() & ~0x3fu;
#else
    return 0;
#endif
}

static void set_fp_mode(unsigned m)
{
#ifdef QKV_HAVE_MXCSR
    if (fp_mode() != m)
        _mm_setcsr(m | (_mm_getcsr() & 0x3fu));
#else
    (void)m;
#endif
}

#define MXCSR_FTZ_DAZ 0x8040u /* flush to zero (bit 15), denormals are zero (bit 6) */

#ifdef QKV_HAVE_MXCSR
/* Nonzero when this thread's arithmetic flushes a subnormal result to 0
 * (an emulator such as valgrind may accept the mode and not follow it). */
static int flushes(void)
{
    volatile float a = 0x1p-70f, b = 0x1p-70f;
    const float p = a * b; /* 2^-140, subnormal */
    uint32_t bits;
    memcpy(&bits, &p, sizeof bits); /* as bits: a flushing thread reads it as 0 */
    return bits == 0;
}
#endif

int qkv_flush_denormals(int on)
{
#ifdef QKV_HAVE_MXCSR
    const unsigned m = fp_mode();
    set_fp_mode(on ? m | MXCSR_FTZ_DAZ : m & ~MXCSR_FTZ_DAZ);
    if (on && !flushes()) { /* set, but not followed: as if there were no such mode */
        set_fp_mode(m);
        return 0;
    }
    return 1;
#else
    (void)on;
    return 0;
#endif
}

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Range p of [0,n) cut into parts contiguous ranges. */
static void range_of(size_t n, int parts, int p, size_t *i0, size_t *i1)
{
    *i0 = n * (size_t)p / (size_t)parts;
    *i1 = n * (size_t)(p + 1) / (size_t)parts;
}

/* Waits until s->round moves past seen: spinning first, then sleeping. */
static unsigned long wait_round(slot *s, unsigned long seen)
{
    long long until = now_ns() + SPIN_NS;
    for (int i = 0;; i++) {
        unsigned long r = atomic_load_explicit(&s->round, memory_order_acquire);
        if (r != seen)
            return r;
        cpu_relax();
        if ((i & 255) == 255 && now_ns() > until)
            break;
    }
    pthread_mutex_lock(&pool.lock);
    while (atomic_load_explicit(&s->round, memory_order_acquire) == seen)
        pthread_cond_wait(&pool.go, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
    return atomic_load_explicit(&s->round, memory_order_acquire);
}

static void *worker_main(void *arg)
{
    const int me = (int)(size_t)arg; /* 1.. : the caller runs part 0 */
    slot *s = &pool.slot[me];
    unsigned long seen = 0;
    for (;;) {
        seen = wait_round(s, seen);
        if (s->fn == NULL)
            return NULL; /* stop_workers */
        set_fp_mode(s->csr);
        s->fn(s->ctx, me, s->i0, s->i1);
        atomic_fetch_sub_explicit(&pool.pending, 1, memory_order_release);
    }
}

/* Around fork(): the lock is held across it, so that the child's copy is
 * in a known state (no other thread was inside it); the child, where none
 * of the workers exist, then takes the pool as never started, its
 * mailboxes back at round 0 as a new worker expects them. */
static void fork_prepare(void)
{
    pthread_mutex_lock(&pool.lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&pool.lock);
}

static void fork_child(void)
{
    pool.started = 0;
    pool.busy = 0;
    atomic_store_explicit(&pool.pending, 0, memory_order_relaxed);
    for (int w = 0; w < MAX_THREADS; w++) {
        atomic_store_explicit(&pool.slot[w].round, 0, memory_order_relaxed);
        pool.slot[w].fn = NULL;
    }
    pthread_cond_init(&pool.go, NULL); /* the parent's sleepers are not here */
    pthread_mutex_unlock(&pool.lock);
}

/* At exit: every worker gets a stop message and is joined, so that no
 * thread outlives the program's data (and leak checkers see none). */
static void stop_workers(void)
{
    pthread_mutex_lock(&pool.lock);
    int n = pool.started;
    for (int w = 1; w <= n; w++) {
        pool.slot[w].fn = NULL;
        atomic_fetch_add_explicit(&pool.slot[w].round, 1, memory_order_release);
    }
    pool.started = 0;
    pthread_cond_broadcast(&pool.go);
    pthread_mutex_unlock(&pool.lock);
    for (int w = 1; w <= n; w++)
        pthread_join(pool.thread[w], NULL);
}

qkv_status qkv_threads_use(int n, qkv_error *err)
{
    if (n < 1 || n > MAX_THREADS)
        return qkv_error_set(err, QKV_ERR_ARG, "threads: %d is not a thread count from 1 to %d", n,
                             MAX_THREADS);
    pthread_mutex_lock(&pool.lock);
    pool.want = n;
    pthread_mutex_unlock(&pool.lock);
    return QKV_OK;
}

int qkv_threads_from_env(const char *s)
{
    /* digits alone: strtol would skip leading spaces and take a sign */
    size_t n = s != NULL ? strspn(s, "0123456789") : 0;
    if (n == 0 || s[n] != '\0')
        return 1;
    long v = strtol(s, NULL, 10); /* LONG_MAX on overflow: out of range */
    return v >= 1 && v <= MAX_THREADS ? (int)v : 1;
}

int qkv_threads(void)
{
    pthread_mutex_lock(&pool.lock);
    if (pool.want == 0) /* first use */
        pool.want = qkv_threads_from_env(getenv("QKV_THREADS"));
    int n = pool.want;
    pthread_mutex_unlock(&pool.lock);
    return n;
}

int qkv_parallel_parts(size_t n, size_t work, int max_parts)
{
    int parts = qkv_threads();
    parts = parts < max_parts ? parts : max_parts;
    /* each part should have enough work to pay for handing it over */
    while (parts > 1 && work / (size_t)parts < QKV_PARALLEL_MIN_WORK)
        parts--;
    if ((size_t)parts > n)
        parts = (int)n;
    return parts < 1 ? 1 : parts;
}

void qkv_parallel_for(size_t n, size_t work, int max_parts, qkv_range_fn fn, void *ctx)
{
    int parts = qkv_parallel_parts(n, work, max_parts);
    if (parts <= 1) { /* the default: no locking on the way */
        fn(ctx, 0, 0, n);
        return;
    }
    pthread_mutex_lock(&pool.lock);
    if (pool.busy) { /* called while a job runs: on this thread alone */
        pthread_mutex_unlock(&pool.lock);
        fn(ctx, 0, 0, n);
        return;
    }
    while (pool.started < parts - 1) { /* start workers as first needed */
        static int stop_registered, fork_registered;
        if (!stop_registered && atexit(stop_workers) != 0)
            break; /* without a way to stop them, start none */
        stop_registered = 1;
        if (!fork_registered && pthread_atfork(fork_prepare, fork_parent, fork_child) != 0)
            break; /* nor without a way to forget them in a forked child */
        fork_registered = 1;
        int w = pool.started + 1;
        if (pthread_create(&pool.thread[w], NULL, worker_main, (void *)(size_t)w) != 0)
            break;
        pool.started++;
    }
    if (parts > pool.started + 1)
        parts = pool.started + 1; /* could not start them all: fewer parts */
    pool.busy = 1;
    atomic_store_explicit(&pool.pending, parts - 1, memory_order_relaxed);
    const unsigned csr = fp_mode();
    for (int w = 1; w < parts; w++) { /* idle since their last job: fill in, post */
        slot *sl = &pool.slot[w];
        sl->fn = fn;
        sl->ctx = ctx;
        sl->csr = csr;
        range_of(n, parts, w, &sl->i0, &sl->i1);
        atomic_fetch_add_explicit(&sl->round, 1, memory_order_release);
    }
    pthread_cond_broadcast(&pool.go); /* for workers that went to sleep */
    pthread_mutex_unlock(&pool.lock);
    size_t i0, i1;
    range_of(n, parts, 0, &i0, &i1);
    fn(ctx, 0, i0, i1);
    while (atomic_load_explicit(&pool.pending, memory_order_acquire) > 0)
        cpu_relax();
    pthread_mutex_lock(&pool.lock);
    pool.busy = 0;
    pthread_mutex_unlock(&pool.lock);
}
